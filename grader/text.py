"""Make text from a submission safe to print, store and put in a spreadsheet.

Everything a student controls (file names, answers, exception messages, notebook metadata) passes
through here before it reaches a terminal, a report, a CSV cell or a JSON result. Lone surrogates
would crash UTF-8 encoding after a whole batch was graded; control characters (ANSI escapes) would
reach the terminal raw; a newline would add fake rows to a table.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 and C1 controls and DEL, except tab and newline; also bidi overrides that reorder a line.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def clean(text: str, limit: int | None = None) -> str:
    """Replace lone surrogates with U+FFFD, drop control characters, cut to ``limit`` characters."""
    text = _CONTROL.sub("", _SURROGATE.sub("\ufffd", text))
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 1)] + "…"
    return text


def one_line(text: str, limit: int | None = None) -> str:
    """``clean`` and fold all whitespace runs (newlines included) to one space: for table cells."""
    return clean(re.sub(r"\s+", " ", text), limit).strip()


def csv_cell(text: str) -> str:
    """A one-line cell a spreadsheet shows as text, never evaluates as a formula."""
    text = one_line(text)
    return "'" + text if text.startswith(_FORMULA_START) else text
