"""The one exception type users see: a problem in an input file, located to a line.

Every malformed input (lesson source, rubric, config, submission) is reported as
``file:line: what is wrong`` so that an author can jump straight to it.
"""

from __future__ import annotations

from pathlib import Path


class CourseError(Exception):
    """A user-facing error. The CLI prints it without a traceback and exits non-zero."""


class SourceError(CourseError):
    """A problem at a known place in a file."""

    def __init__(self, path: str | Path, line: int | None, problem: str) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")
