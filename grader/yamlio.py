"""YAML reading with errors located in the file the YAML came from.

ruamel.yaml is used for everything: safe loading of front matter, cell options and rubrics, and
round-trip editing of ``_quarto.yml`` (which keeps its comments and layout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from .errors import SourceError


def load_yaml(text: str, path: str | Path, first_line: int = 1) -> Any:
    """Parse YAML safely; on error, raise SourceError at the offending line.

    ``first_line`` is the line of the file on which ``text`` starts, so that YAML embedded in a
    larger file (front matter, ``#|`` cell options) is located in that file.
    """
    try:
        return YAML(typ="safe", pure=True).load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = first_line + mark.line if mark is not None else first_line
        problem = exc.problem or exc.context or "invalid YAML"
        raise SourceError(path, line, f"invalid YAML: {problem}") from None
    except YAMLError as exc:
        raise SourceError(path, first_line, f"invalid YAML: {exc}") from None


def round_trip() -> YAML:
    """A YAML instance that preserves comments, order and the indentation used in _quarto.yml."""
    yaml = YAML(typ="rt")
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml
