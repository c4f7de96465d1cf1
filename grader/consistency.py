"""Check a lesson against its own rubric: no veto may fail a sentence that the lesson itself teaches.

A veto is a keyword-level misconception. Written too broadly, it fails correct answers, and the
surest correct answers are the lesson's own sentences. This module reads the lesson's teaching
text (prose of every section, the key points of the reference answers) as plain sentences and runs
every veto over them. Left out on purpose: code cells, the YAML front matter, the three question
divs (they may quote a claim to discuss) and the section 检查与通过标准, which lists the
misconceptions themselves.

Sentences are scored paragraph by paragraph, so that a refutation in the next sentence
(…。这种说法是错的。) and a pronoun's antecedent in the previous one are seen as in an answer.
A lesson sentence that really does read like the misconception out of context can be listed in
rubric.yml under ``prose_exceptions:`` with a reason.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

from .lesson import QUESTION_IDS, Lesson
from .rubric import ProseException, Rubric, normalise, normalise_mapped, split_sentences, veto_firings

EXCLUDED_SECTION = "检查与通过标准"

_MD = MarkdownIt("commonmark").enable("table")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_DIV_FENCE = re.compile(r"^:{3,}")
_HEADING_ATTRS = re.compile(r"\s*\{[^{}]*\}\s*$")
_FOOTNOTE = re.compile(r"\^\[([^\[\]]*)\]")
_INLINE_MATH = re.compile(r"(?<!\\)\$(?!\$)(.+?)(?<!\\)\$")
_EMPTY_CELL = re.compile(r"^[\s—–\-]*$")

# LaTeX → plain text: enough for a keyword rubric to read a formula as the lesson writes it.
_LATEX_SYMBOLS = {
    "times": "×",
    "cdot": "·",
    "approx": "≈",
    "le": "≤",
    "leq": "≤",
    "ge": "≥",
    "geq": "≥",
    "ne": "≠",
    "to": "→",
    "longrightarrow": "→",
    "rightarrow": "→",
    "infty": "∞",
    "in": "∈",
    "dots": "…",
    "cdots": "…",
    "ldots": "…",
    "vdots": "…",
    "lceil": "⌈",
    "rceil": "⌉",
    "lfloor": "⌊",
    "rfloor": "⌋",
    "lVert": "‖",
    "rVert": "‖",
    "sqrt": "√",
    "partial": "∂",
    "nabla": "∇",
    "sum": "Σ",
    "top": "ᵀ",
    "Psi": "Ψ",
    "alpha": "α",
    "beta": "β",
    "gamma": "γ",
    "eta": "η",
    "mu": "μ",
    "lambda": "λ",
    "epsilon": "ε",
    "pi": "π",
    "ell": "ℓ",
}
_LATEX_DROP = {"left", "right", "big", "Big", "bigg", "quad", "qquad", "displaystyle", "begin", "end"}
_LATEX_WRAP = re.compile(
    r"\\(?:text|mathrm|mathbf|mathit|mathcal|operatorname|hat|bar|tilde|underbrace|overbrace)\{([^{}]*)\}"
)
_LATEX_FRAC = re.compile(r"\\[td]?frac\{([^{}]*)\}\{([^{}]*)\}")
_LATEX_ENV = re.compile(r"\\(?:begin|end)\{[^{}]*\}")
_LATEX_COMMAND = re.compile(r"\\([A-Za-z]+)")


@dataclass(frozen=True)
class _Block:
    """One paragraph, list item, heading or table row of teaching text, markup stripped."""

    text: str
    starts: tuple[int, ...]  # offsets in ``text`` where a new source line begins
    lines: tuple[int, ...]  # the 1-based .qmd line of each of those offsets

    def line_at(self, offset: int) -> int:
        return self.lines[max(0, bisect_right(self.starts, offset) - 1)]


def latex_plain(math: str) -> str:
    """A formula as plain text: \\frac{a}{b} → a/b, \\times → ×, \\text{x} → x, spacing commands dropped."""
    text = _LATEX_ENV.sub(" ", math)
    for _ in range(4):  # nested wrappers, innermost first
        text = _LATEX_FRAC.sub(r"(\1)/(\2)", _LATEX_WRAP.sub(r"\1", text))
    text = re.sub(r"\\[,;:! ]|\\\\|&", " ", text)

    def command(m: re.Match[str]) -> str:
        name = m.group(1)
        if name in _LATEX_DROP:
            return " "
        return _LATEX_SYMBOLS.get(name, name)

    text = _LATEX_COMMAND.sub(command, text)
    return re.sub(r"\s+", " ", text.replace("{", "").replace("}", "")).strip()


def _excluded_lines(lesson: Lesson) -> set[int]:
    """0-based indices of the lines that are not teaching text (see the module docstring)."""
    lines = lesson.lines
    skip: set[int] = set()
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), len(lines) - 1)
        skip.update(range(end + 1))
    for div in lesson.questions:
        skip.update(range(div.line - 1, div.end_line))
    answer_starts = {d.line - 1 for d in lesson.answer_blocks}
    for i, line in enumerate(lines):
        if re.match(rf"^##\s+{re.escape(EXCLUDED_SECTION)}\s*(\{{.*\}})?\s*$", line):
            j = i + 1
            while j < len(lines) and j not in answer_starts and not re.match(r"^#{1,2}\s", lines[j]):
                j += 1
            skip.update(range(i, j))
    return skip


def _prepared_source(lesson: Lesson) -> str:
    """The lesson with excluded lines and div fences blanked and math made plain, line for line.

    Keeping one output line per source line lets markdown-it's line map point into the .qmd.
    Div fences are blanked because markdown-it would read ':::' as text of the paragraph above.
    """
    skip = _excluded_lines(lesson)
    out: list[str] = []
    fence: str | None = None
    display: list[int] | None = None  # indices in ``out`` of an open $$ block
    for i, line in enumerate(lesson.lines):
        if fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            out.append(line)
            continue
        if (m := _FENCE.match(line)) is not None and display is None:
            fence = m.group(1)
            out.append(line)
            continue
        if i in skip or _DIV_FENCE.match(line):
            out.append("")
            continue
        if line.strip().startswith("$$"):
            body = line.strip()[2:]
            if display is None and body.rstrip().endswith("$$") and body.strip() != "":
                out.append(latex_plain(body.rstrip()[:-2]))
                continue
            if display is None:
                display = [len(out)]
                out.append(latex_plain(body))
            else:
                display.append(len(out))
                out.append(latex_plain(body))
                # the formula reads as one paragraph: keep it on its first line, keep the count
                text = " ".join(out[k] for k in display if out[k])
                for k in display:
                    out[k] = ""
                out[display[0]] = text
                display = None
            continue
        if display is not None:
            display.append(len(out))
            out.append(latex_plain(line))
            continue
        line = _FOOTNOTE.sub(r"（\1）", line)
        out.append(_INLINE_MATH.sub(lambda m: latex_plain(m.group(1)), line))
    return "\n".join(out) + "\n"


def _inline_text(token: Token, first_line: int) -> tuple[str, list[int], list[int]]:
    """Plain text of an inline token, with the offsets where each of its source lines starts."""
    parts: list[str] = []
    starts, lines = [0], [first_line]
    for child in token.children or []:
        if child.type in ("text", "code_inline", "image"):  # an image reads as its alt text
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            prev = parts[-1][-1:] if parts else ""
            parts.append("" if prev and not prev.isascii() else " ")
            starts.append(sum(len(p) for p in parts))
            lines.append(lines[-1] + 1)
    return "".join(parts), starts, lines


def _blocks(lesson: Lesson) -> list[_Block]:
    """The lesson's teaching text as blocks: paragraphs, list items, headings, table rows."""
    tokens = _MD.parse(_prepared_source(lesson))
    blocks: list[_Block] = []
    row: list[str] | None = None
    row_line = 0
    heading = False
    for tok in tokens:
        if tok.type == "tr_open":
            row, row_line = [], (tok.map[0] + 1 if tok.map else 0)
        elif tok.type == "tr_close" and row is not None:
            cells = [c for c in row if not _EMPTY_CELL.match(c)]
            if cells:
                blocks.append(_Block("，".join(cells), (0,), (row_line,)))
            row = None
        elif tok.type == "heading_open":
            heading = True
        elif tok.type == "heading_close":
            heading = False
        elif tok.type == "inline" and tok.map:
            text, starts, lines = _inline_text(tok, tok.map[0] + 1)
            if row is not None:
                row.append(text.strip())
                continue
            if heading:
                text = _HEADING_ATTRS.sub("", text)
            if text.strip():
                blocks.append(_Block(text, tuple(starts), tuple(lines)))
    return blocks


def _sentences(block: _Block) -> list[tuple[int, str]]:
    """(line, sentence) for each sentence of a block, cut exactly as the scorer cuts answers."""
    _, origin = normalise_mapped(block.text)
    return [(block.line_at(origin[s.start] if origin else 0), s.original) for s in split_sentences(block.text)]


def lesson_claims(lesson: Lesson) -> list[tuple[int, str]]:
    """(line in the .qmd, sentence) for every sentence of the lesson's teaching text and key points."""
    return [claim for block in _blocks(lesson) for claim in _sentences(block)]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", normalise(text))


def self_contradictions(
    rubric: Rubric, lesson: Lesson, exceptions: Sequence[ProseException] | None = None
) -> list[str]:
    """One ``file:line: problem`` per veto that fires on a sentence of the lesson's own teaching text.

    ``exceptions`` defaults to the rubric's ``prose_exceptions``: a firing whose sentence contains an
    exception's text (for the same veto) is not reported. An exception that matches no firing is
    reported at its line in rubric.yml, so that the list cannot go stale.
    """
    allowed = list(rubric.prose_exceptions if exceptions is None else exceptions)
    used: set[int] = set()
    where = f"lessons/{lesson.path.name}"
    problems: list[str] = []
    for block in _blocks(lesson):
        claims = _sentences(block)
        fired = {(index, veto.id) for qid in QUESTION_IDS for veto, index, _ in veto_firings(rubric, qid, block.text)}
        for index, veto_id in sorted(fired):
            line, sentence = claims[index]
            hits = [k for k, e in enumerate(allowed) if e.veto == veto_id and _squash(e.text) in _squash(sentence)]
            if hits:
                used.update(hits)
                continue
            problems.append(f"{where}:{line}: veto {veto_id} fires on the lesson's own sentence: «{sentence}»")
    for k, exc in enumerate(allowed):
        if k not in used:
            at = f"{rubric.path}:{exc.line}" if exc.line is not None else rubric.path
            problems.append(
                f"{at}: prose exception for veto {exc.veto} matches no sentence of {where} "
                f"that the veto fires on: «{exc.text}»; remove it"
            )
    return problems
