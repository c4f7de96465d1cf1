"""Parse a lesson's ``.qmd`` source into a Lesson model, or fail with ``file:line: problem``.

The parser understands only the parts of Quarto markdown that the authoring contract uses
(docs/authoring.md): YAML front matter, fenced code cells with ``#|`` options, and pandoc fenced
divs with attributes. Everything else is prose and passes through untouched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import SourceError
from .yamlio import load_yaml

QUESTION_IDS = ("q1", "q2", "q3")
QUESTION_POINTS = 2
CODE_POINTS = 4
SECTIONS = ("本课目标", "核心概念", "具体演示与数值推演", "代码填空题", "三个问答题", "检查与通过标准")
CELL_ROLES = ("exercise", "solution", "selfcheck")
DIV_ROLES = ("question", "answer", "keypoints", "selfcheck-hints")
# The student's self-check: one code cell of plain asserts built from the page's worked examples,
# and the "自查提示" paragraph it comes from. Both are shown on the page and copied into the notebook.
SELFCHECK_ID = "selfcheck"
SELFCHECK_HINTS_ID = "selfcheck-hints"
# Cell ids the notebook uses for its own cells; an exercise may not take one of them.
NOTEBOOK_IDS = ("intro", SELFCHECK_HINTS_ID, SELFCHECK_ID, *QUESTION_IDS, *(f"{q}-prompt" for q in QUESTION_IDS))
FRONT_MATTER_KEYS = ("title", "lesson", "prerequisites", "playbook")

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>.*?)\s*$")
_DIV_OPEN = re.compile(r"^(?P<colons>:{3,})\s*(?P<attrs>\{.*\}|[^\s:{][^{]*?)\s*:*\s*$")
_DIV_CLOSE = re.compile(r"^:{3,}\s*$")
_OPTION = re.compile(r"^#\|\s?(.*)$")
_ATTR = re.compile(r'#(?P<id>[\w:.-]+)|\.(?P<cls>[\w-]+)|(?P<key>[\w-]+)=(?:"(?P<q>[^"]*)"|(?P<v>[^\s}]+))')
_LESSON_FILE = re.compile(r"^lesson(\d{2})\.qmd$")
# Label prefixes that Quarto turns into numbered, captioned cross-references.
QUARTO_CROSSREF_PREFIXES = frozenset(
    "fig tbl lst eq sec thm lem cor prp cnj def exm exr sol rem tip nte wrn imp cau".split()
)
_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")


@dataclass(frozen=True)
class Cell:
    """An executable code cell (```` ```{python} ````) and its ``#|`` options."""

    id: str  # '' when the cell has no label
    role: str | None
    options: dict[str, Any]
    code: str  # the source without its option lines
    line: int  # 1-based line of the opening fence
    end_line: int  # line of the closing fence
    in_answer: bool
    code_line: int = 0  # line of the first code line after the options (for errors inside the code)

    @property
    def solves(self) -> str | None:
        value = self.options.get("solves")
        return str(value) if value is not None else None


@dataclass(frozen=True)
class Div:
    """A pandoc fenced div that carries a ``course_role`` attribute."""

    id: str | None
    classes: tuple[str, ...]
    attrs: dict[str, str]
    line: int
    end_line: int
    body: str  # the markdown between the fences

    @property
    def role(self) -> str | None:
        return self.attrs.get("course_role")


@dataclass
class Lesson:
    """One lesson, as written by its author: the single source of both built trees."""

    path: Path
    slug: str  # "lesson04"
    number: int
    title: str
    meta: dict[str, Any]
    lines: list[str]
    cells: list[Cell] = field(default_factory=list)
    divs: list[Div] = field(default_factory=list)

    @property
    def exercises(self) -> list[Cell]:
        return [c for c in self.cells if c.role == "exercise"]

    @property
    def solutions(self) -> list[Cell]:
        return [c for c in self.cells if c.role == "solution"]

    @property
    def selfcheck(self) -> Cell | None:
        """The self-check cell, if the lesson has one (at most one is allowed)."""
        return next((c for c in self.cells if c.role == "selfcheck"), None)

    @property
    def selfcheck_hints(self) -> Div | None:
        """The "自查提示" block that the self-check cell is built from, if marked."""
        return next((d for d in self.divs if d.role == "selfcheck-hints"), None)

    @property
    def questions(self) -> list[Div]:
        return [d for d in self.divs if d.role == "question"]

    @property
    def answer_blocks(self) -> list[Div]:
        return [d for d in self.divs if d.role == "answer"]

    def solution_for(self, exercise_id: str) -> Cell:
        return next(c for c in self.solutions if c.solves == exercise_id)

    def keypoints(self, question_id: str) -> list[str]:
        """The key points of a question's reference answer, one string per bullet."""
        div = next(d for d in self.divs if d.role == "keypoints" and d.attrs.get("question") == question_id)
        items: list[str] = []
        for raw in div.body.splitlines():
            text = raw.strip()
            if re.match(r"^[-*+]\s+", text):
                items.append(re.sub(r"^[-*+]\s+", "", text))
            elif text and items:
                items[-1] += text
        return items

    def question_text(self, question_id: str) -> str:
        return next(d.body.strip() for d in self.questions if d.id == question_id)


def parse_attrs(text: str) -> tuple[str | None, tuple[str, ...], dict[str, str]]:
    """Parse a pandoc attribute block ``{#id .class key="value"}`` (or a bare class name)."""
    inner = text.strip()
    if not inner.startswith("{"):
        return None, (inner,), {}
    inner = inner[1:-1]
    ident: str | None = None
    classes: list[str] = []
    attrs: dict[str, str] = {}
    for m in _ATTR.finditer(inner):
        if m.group("id"):
            ident = m.group("id")
        elif m.group("cls"):
            classes.append(m.group("cls"))
        else:
            attrs[m.group("key")] = m.group("q") if m.group("q") is not None else m.group("v")
    return ident, tuple(classes), attrs


def parse_lesson(path: str | Path, display: str | None = None) -> Lesson:
    """Read and validate one lesson. ``display`` is the path shown in error messages."""
    path = Path(path)
    where = display or str(path)
    name = _LESSON_FILE.match(path.name)
    if not name:
        raise SourceError(where, None, "a lesson file must be named lessonNN.qmd (two digits)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(where, None, f"not UTF-8 text ({exc.reason}); save the file as UTF-8") from None
    lines = text.splitlines()
    meta, body_start = _front_matter(lines, where)
    number = _check_meta(meta, int(name.group(1)), where, lines[:body_start])
    lesson = Lesson(path=path, slug=path.stem, number=number, title=str(meta["title"]), meta=meta, lines=lines)
    _scan_blocks(lesson, body_start, where)
    _validate(lesson, where)
    return lesson


def _front_matter(lines: list[str], where: str) -> tuple[dict[str, Any], int]:
    if not lines or lines[0].strip() != "---":
        raise SourceError(where, 1, "the file must start with YAML front matter between '---' lines")
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            meta = load_yaml("\n".join(lines[1:i]), where, first_line=2)
            if not isinstance(meta, dict):
                raise SourceError(where, 2, "front matter must be a YAML mapping (key: value lines)")
            return meta, i + 1
    raise SourceError(where, 1, "front matter opened here is never closed with '---'")


def _check_meta(meta: dict[str, Any], file_number: int, where: str, head: list[str]) -> int:
    """Check the four required keys; ``head`` is the front matter's lines, to locate a bad key."""
    missing = [k for k in FRONT_MATTER_KEYS if k not in meta]
    if missing:
        raise SourceError(where, 1, f"front matter lacks {', '.join(missing)} (see docs/authoring.md)")
    number = meta["lesson"]
    if not isinstance(number, int) or isinstance(number, bool):
        raise SourceError(where, 1, f"front matter 'lesson' must be an integer, got {number!r}")
    if number != file_number:
        raise SourceError(where, 1, f"front matter says lesson {number} but the file name says {file_number}")
    for key in ("prerequisites", "playbook"):
        if not isinstance(meta[key], list):
            raise SourceError(where, _key_line(head, key), f"front matter '{key}' must be a list, e.g. {key}: []")
    # The syllabus links each prerequisite, so it must name an earlier lesson by its number.
    for item in meta["prerequisites"]:
        if isinstance(item, bool) or not isinstance(item, int) or not 0 < item < number:
            raise SourceError(
                where,
                _key_line(head, "prerequisites"),
                f"front matter 'prerequisites' lists lesson numbers before {number}, e.g. [3]; got {item!r}",
            )
    return number


def _key_line(head: list[str], key: str) -> int:
    """The 1-based line of a top-level front-matter key (1 when it cannot be found)."""
    return next((i for i, line in enumerate(head, start=1) if line.startswith(f"{key}:")), 1)


def _scan_blocks(lesson: Lesson, start: int, where: str) -> None:
    """Find code cells and fenced divs, tracking nesting so that each knows its answer block."""
    lines = lesson.lines
    stack: list[tuple[int, str | None, tuple[str, ...], dict[str, str]]] = []
    i = start
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            i = _scan_fence(lesson, i, fence, stack, where)
            continue
        if _DIV_CLOSE.match(line):
            if not stack:
                raise SourceError(where, i + 1, "':::' closes a div that was never opened")
            open_line, ident, classes, attrs = stack.pop()
            if "course_role" in attrs:
                body = "\n".join(lines[open_line:i])
                lesson.divs.append(Div(ident, classes, attrs, open_line, i + 1, body))
        elif (m := _DIV_OPEN.match(line)) is not None:
            ident, classes, attrs = parse_attrs(m.group("attrs"))
            role = attrs.get("course_role")
            if role is not None and role not in DIV_ROLES:
                raise SourceError(
                    where, i + 1, f"unknown course_role {role!r} on a div; use one of {', '.join(DIV_ROLES)}"
                )
            stack.append((i + 1, ident, classes, attrs))
        i += 1
    if stack:
        raise SourceError(where, stack[-1][0], "div opened here is never closed with ':::'")
    lesson.divs.sort(key=lambda d: d.line)


def _scan_fence(lesson: Lesson, i: int, fence: re.Match[str], stack: list, where: str) -> int:
    """Consume one fenced code block starting at line index i; return the index after it."""
    lines = lesson.lines
    marker = fence.group("fence")
    closing = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}\s*$")
    # A same-length fence with an info string inside the block means the author forgot to close it.
    reopening = re.compile(rf"^ {{0,3}}{re.escape(marker)}(?!{re.escape(marker[0])})\s*\S")
    end = None
    for j in range(i + 1, len(lines)):
        if closing.match(lines[j]):
            end = j
            break
        if reopening.match(lines[j]):
            break
    if end is None:
        raise SourceError(where, i + 1, "code fence opened here is never closed")
    info = fence.group("info")
    if re.match(r"^\{\s*python\b", info):
        body = lines[i + 1 : end]
        option_lines: list[str] = []
        for raw in body:
            opt = _OPTION.match(raw)
            if not opt:
                break
            option_lines.append(opt.group(1))
        options = load_yaml("\n".join(option_lines), where, first_line=i + 2) if option_lines else {}
        if options is None:
            options = {}
        if not isinstance(options, dict):
            raise SourceError(where, i + 2, "'#|' cell options must be 'key: value' lines")
        role = options.get("course_role")
        if role is not None and role not in CELL_ROLES:
            at = next(k for k, opt in enumerate(option_lines) if opt.lstrip().startswith("course_role"))
            raise SourceError(where, i + 2 + at, f"unknown course_role {role!r}; use one of {', '.join(CELL_ROLES)}")
        code = "\n".join(body[len(option_lines) :])
        in_answer = any(frame[3].get("course_role") == "answer" for frame in stack)
        label = options.get("label")
        lesson.cells.append(
            Cell(
                str(label) if label is not None else "",
                role,
                options,
                code,
                i + 1,
                end + 1,
                in_answer,
                i + 2 + len(option_lines),
            )
        )
    return end + 1


def _validate(lesson: Lesson, where: str) -> None:
    seen: dict[str, int] = {}
    for line, ident in sorted(
        [(c.line, c.id) for c in lesson.cells if c.id] + [(d.line, d.id) for d in lesson.divs if d.id]
    ):
        if ident in seen:
            raise SourceError(where, line, f"duplicate id {ident!r} (first used on line {seen[ident]})")
        seen[ident] = line

    answers = lesson.answer_blocks
    if len(answers) > 1:
        raise SourceError(
            where,
            answers[1].line,
            f"a second answer block; put everything answer-only in the one on line {answers[0].line}",
        )
    for block in answers:
        if "content-visible" not in block.classes or block.attrs.get("when-profile") != "answers":
            raise SourceError(
                where, block.line, 'the answer block must also carry .content-visible when-profile="answers"'
            )
        inner = [d for d in lesson.divs if block.line < d.line < block.end_line and d.role == "answer"]
        if inner:
            raise SourceError(where, inner[0].line, "answer blocks cannot be nested")

    for cell in lesson.cells:
        if cell.role is None:
            continue
        if not cell.id:
            raise SourceError(where, cell.line, f"a {cell.role} cell needs a stable id: add '#| label: ...'")
        if not _ID.match(cell.id):
            raise SourceError(
                where,
                cell.line,
                f"cell id {cell.id!r} must start with a letter and use only letters, digits, '-' or '_'",
            )
        prefix = cell.id.split("-", 1)[0]
        if "-" in cell.id and prefix in QUARTO_CROSSREF_PREFIXES:
            raise SourceError(
                where,
                cell.line,
                f"cell id {cell.id!r}: Quarto reads the prefix '{prefix}-' as a cross-reference and captions the "
                f"cell (e.g. '解 1.'); use another prefix, such as ref-{cell.id.split('-', 1)[1]}",
            )
        if cell.role == "exercise":
            if cell.in_answer:
                raise SourceError(where, cell.line, "an exercise cell cannot sit inside the answer block")
            if cell.options.get("eval") is not False:
                raise SourceError(
                    where, cell.line, "an exercise cell needs '#| eval: false' (its blanks fail when run)"
                )
        if cell.role == "exercise" and cell.id in NOTEBOOK_IDS:
            raise SourceError(
                where, cell.line, f"exercise id {cell.id!r} is used by the notebook itself; choose another label"
            )
        if cell.role == "solution" and not cell.in_answer:
            raise SourceError(
                where, cell.line, 'a solution cell must sit inside the answer block (::: {... course_role="answer"})'
            )

    exercises = lesson.exercises
    if not exercises:
        raise SourceError(
            where, _heading_line(lesson, "代码填空题"), "the lesson has no exercise cell ('#| course_role: exercise')"
        )
    exercise_ids = {c.id for c in exercises}
    solved: dict[str, int] = {}
    for sol in lesson.solutions:
        if sol.solves not in exercise_ids:
            raise SourceError(
                where,
                sol.line,
                f"solution cell must name its exercise with '#| solves: <id>'; known exercises: {', '.join(sorted(exercise_ids))}",
            )
        if sol.solves in solved:
            raise SourceError(
                where, sol.line, f"exercise {sol.solves!r} already has a solution on line {solved[sol.solves]}"
            )
        solved[sol.solves] = sol.line
    for ex in exercises:
        if ex.id not in solved:
            raise SourceError(where, ex.line, f"exercise {ex.id!r} has no solution cell ('#| solves: {ex.id}')")

    _validate_selfcheck(lesson, where)

    question_ids = [d.id for d in lesson.questions]
    if sorted(q for q in question_ids if q) != list(QUESTION_IDS) or len(question_ids) != 3:
        raise SourceError(
            where,
            _heading_line(lesson, "三个问答题"),
            f"a lesson needs exactly three questions with ids q1, q2, q3; found {question_ids or 'none'}",
        )
    for div in lesson.divs:
        if div.role == "question" and any(a.line < div.line < a.end_line for a in answers):
            raise SourceError(where, div.line, "a question cannot sit inside the answer block")
        if div.role == "keypoints":
            if div.attrs.get("question") not in QUESTION_IDS:
                raise SourceError(where, div.line, 'a keypoints div needs question="q1", "q2" or "q3"')
            if not any(a.line < div.line < a.end_line for a in answers):
                raise SourceError(where, div.line, "key points must sit inside the answer block")
    for qid in QUESTION_IDS:
        found = [d for d in lesson.divs if d.role == "keypoints" and d.attrs.get("question") == qid]
        if len(found) != 1:
            line = answers[0].line if answers else 1
            raise SourceError(
                where, line, f"the answer block needs exactly one keypoints div for {qid}; found {len(found)}"
            )
        if not lesson.keypoints(qid):
            raise SourceError(where, found[0].line, f"the key points of {qid} must be a bullet list")

    for title in SECTIONS:
        if _heading_line(lesson, title, default=None) is None:
            raise SourceError(where, 1, f"missing section '## {title}' (sections: {', '.join(SECTIONS)})")


def _validate_selfcheck(lesson: Lesson, where: str) -> None:
    """The self-check is student-visible and runs after the exercises: check where and how it sits."""
    answers = lesson.answer_blocks
    cells = [c for c in lesson.cells if c.role == "selfcheck"]
    if len(cells) > 1:
        raise SourceError(
            where, cells[1].line, f"a second self-check cell; a lesson has at most one (line {cells[0].line})"
        )
    hints = [d for d in lesson.divs if d.role == "selfcheck-hints"]
    if len(hints) > 1:
        raise SourceError(where, hints[1].line, f"a second selfcheck-hints block; keep one (line {hints[0].line})")
    for div in hints:
        if any(a.line < div.line < a.end_line for a in answers):
            raise SourceError(
                where, div.line, "the selfcheck-hints block is for students: move it out of the answer block"
            )
    for cell in cells:
        if cell.in_answer:
            raise SourceError(where, cell.line, "the self-check cell is for students: move it out of the answer block")
        if cell.id != SELFCHECK_ID:
            raise SourceError(where, cell.line, f"the self-check cell needs '#| label: {SELFCHECK_ID}'")
        if cell.options.get("eval") is not False:
            raise SourceError(
                where, cell.line, "the self-check cell needs '#| eval: false' (it calls the unfinished exercise)"
            )
        last = max(ex.line for ex in lesson.exercises)
        if cell.line < last:
            raise SourceError(where, cell.line, f"the self-check cell must come after the exercise cell on line {last}")
        try:
            compile(cell.code, where, "exec")
        except SyntaxError as exc:
            line = cell.code_line + (exc.lineno or 1) - 1
            raise SourceError(where, line, f"the self-check cell is not valid Python: {exc.msg}") from None


def _heading_line(lesson: Lesson, title: str, default: int | None = 1) -> int | None:
    for i, line in enumerate(lesson.lines):
        if re.match(rf"^##\s+{re.escape(title)}\s*(\{{.*\}})?\s*$", line):
            return i + 1
    return default
