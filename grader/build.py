"""Build the student tree and the answer tree from the course sources.

The student tree is the dangerous one: it must not contain solution text. It is therefore built by
*allow-listing*: only site files are copied, and each lesson's answer block is cut out of the source
before anything else sees it. Nothing from ``solutions/``, ``grader/`` or ``tests/`` is ever copied.

The lessons' front matter is the one list of lessons: the build writes the sidebar of ``_quarto.yml``
and the syllabus table of ``index.qmd`` from it, so adding a lesson needs no edit to either file.
"""

from __future__ import annotations

import io
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedSeq

from .checks import load_checks
from .course import CONFIG, Course
from .errors import SourceError
from .lesson import Lesson
from .notebook import build_notebook, dumps
from .rubric import load_rubric
from .yamlio import load_yaml, round_trip

TREES = ("student", "answers")
INDEX = "index.qmd"
SYLLABUS_MARKER = "::: {#syllabus}"  # an empty div in index.qmd; the build puts the table inside
_REVEALED_OPENING = '::: {course_role="answer"}'
_TITLE_PREFIX = re.compile(r"^第\s*\d+\s*课\s*[：:]\s*")
# Relative widths (percent) of 课次, 课题, playbook chapters, prerequisites; Quarto reads them from
# the caption, pandoc alone from the separator dashes.
_COLUMN_WIDTHS = (12, 38, 32, 18)


@dataclass(frozen=True)
class BuiltTree:
    name: str
    path: Path
    files: list[str]
    released: list[str]  # lessons whose answers this tree shows


def lesson_source(lesson: Lesson, show_answers: bool) -> str:
    """The lesson's .qmd for one tree: answer block removed, or kept and made visible."""
    lines = list(lesson.lines)
    if show_answers:
        # Label each key-point list with its question, so a reader knows which list answers what.
        for div in sorted((d for d in lesson.divs if d.role == "keypoints"), key=lambda d: d.line, reverse=True):
            number = str(div.attrs.get("question", "q?"))[1:]
            lines[div.line - 1 : div.line] = [lines[div.line - 1], f"**问题 {number} 的要点**", ""]
    for block in sorted(lesson.answer_blocks, key=lambda b: b.line, reverse=True):
        if show_answers:
            # The answer tree and released lessons show the block under any profile.
            lines[block.line - 1] = _REVEALED_OPENING
        else:
            del lines[block.line - 1 : block.end_line]
            at = block.line - 1  # keep a single blank line where the block was
            while 0 < at < len(lines) and not lines[at].strip() and not lines[at - 1].strip():
                del lines[at]
    return "\n".join(lines).rstrip("\n") + "\n"


def submit_link(source: str, service_url: str | None, slug: str) -> str:
    """Put a "提交作业" link to the course service right under the lesson's front matter.

    Without ``course.service_url`` the page is left as it was: there is no service to link to.
    """
    if not service_url:
        return source
    lines = source.split("\n")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None) if lines[0] == "---" else None
    at = 0 if end is None else end + 1
    link = f"[提交作业]({service_url.rstrip('/')}/lessons/{slug}){{.course-submit}}"
    lines[at:at] = ["", link, ""]
    return "\n".join(lines)


def _site_files(root: Path, tree: str) -> list[Path]:
    """Top-level site files that belong in a tree (never solutions, code or tests)."""
    keep = [root / "_quarto.yml", root / f"_quarto-{tree}.yml"]
    keep += sorted(root.glob("*.qmd")) + sorted(root.glob("*.css")) + sorted(root.glob("*.scss"))
    return [p for p in keep if p.is_file()]


def check_solutions(course: Course) -> None:
    """Load every lesson's hidden tests and rubric, so that a broken one stops the build (and publish).

    Neither file is copied anywhere; loading them is only a check, with the same ``file:line`` errors
    that grading would hit later, in front of students.
    """
    for slug, lesson in sorted(course.lessons.items()):
        folder = course.solutions_dir(slug)
        load_checks(lesson, folder, f"solutions/{slug}/checks.py")
        load_rubric(folder / "rubric.yml", f"solutions/{slug}/rubric.yml")


def _lessons_in_order(course: Course) -> list[Lesson]:
    return sorted(course.lessons.values(), key=lambda lesson: lesson.number)


def site_config(course: Course) -> str:
    """``_quarto.yml`` with the sidebar section that has ``contents: []`` listing every lesson.

    Edited with ruamel's round trip so that comments, order and the ``course:`` block stay as written.
    """
    path = course.root / CONFIG
    text = path.read_text(encoding="utf-8")
    load_yaml(text, CONFIG)  # a syntax error is reported at its line before the round trip sees it
    yaml = round_trip()
    data = yaml.load(text)
    section = _lessons_section(data, text)
    section["contents"] = CommentedSeq(f"lessons/{lesson.slug}.qmd" for lesson in _lessons_in_order(course))
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    return buffer.getvalue()


def _lessons_section(data: Any, text: str) -> Any:
    """The one sidebar entry ``- section: ...`` whose ``contents`` is the empty list."""
    sidebar = data.get("website", {}).get("sidebar") if isinstance(data, dict) else None
    if isinstance(sidebar, list):  # Quarto allows several sidebars; look in each
        entries = [e for bar in sidebar if isinstance(bar, dict) for e in bar.get("contents") or []]
    elif isinstance(sidebar, dict):
        entries = list(sidebar.get("contents") or [])
    else:
        entries = []
    found = [e for e in entries if isinstance(e, dict) and "section" in e and e.get("contents") == []]
    if len(found) != 1:
        line = next((i for i, raw in enumerate(text.splitlines(), start=1) if raw.strip() == "sidebar:"), None)
        problem = "no" if not found else f"{len(found)}"
        raise SourceError(
            CONFIG,
            line,
            f"website.sidebar needs exactly one '- section: ...' with 'contents: []' for the generated "
            f"lesson list; found {problem}",
        )
    return found[0]


def syllabus_table(course: Course) -> list[str]:
    """The syllabus as a pipe table: one row per lesson, from its front matter."""
    dashes = "|" + "|".join("-" * (w // 2) for w in _COLUMN_WIDTHS) + "|"
    rows = ["| 课次 | 课题 | 对应 playbook 章节 | 先修课 |", dashes]
    for lesson in _lessons_in_order(course):
        topic = _TITLE_PREFIX.sub("", lesson.title) or lesson.title
        chapters = "、".join(str(c) for c in lesson.meta["playbook"]) or "—"
        prereqs = "、".join(_lesson_link(course, n) for n in lesson.meta["prerequisites"]) or "无"
        cells = [f"第 {lesson.number} 课", f"[{_escape(topic)}](lessons/{lesson.slug}.qmd)", _escape(chapters), prereqs]
        rows.append("| " + " | ".join(cells) + " |")
    widths = ",".join(str(w) for w in _COLUMN_WIDTHS)
    rows += ["", f': 已发布的课次 {{tbl-colwidths="[{widths}]"}}']
    return rows


def _lesson_link(course: Course, number: int) -> str:
    slug = f"lesson{number:02d}"
    return f"[第 {number} 课](lessons/{slug}.qmd)" if slug in course.lessons else f"第 {number} 课"


def _escape(text: str) -> str:
    """Keep front-matter text from closing a table cell or a link."""
    return re.sub(r"([|\[\]\\])", r"\\\1", text.replace("\n", " "))


def site_index(course: Course) -> str:
    """``index.qmd`` with the syllabus table inside its ``::: {#syllabus}`` div."""
    lines = (course.root / INDEX).read_text(encoding="utf-8").splitlines()
    opens = [i for i, line in enumerate(lines) if line.strip() == SYLLABUS_MARKER]
    if len(opens) != 1:
        raise SourceError(
            INDEX,
            opens[1] + 1 if opens else None,
            f"needs exactly one '{SYLLABUS_MARKER}' line followed by ':::' where the syllabus table goes; "
            f"found {len(opens)}",
        )
    start = opens[0]
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^:{3,}\s*$", lines[i])), None)
    if end is None:
        raise SourceError(INDEX, start + 1, "the syllabus div opened here is never closed with ':::'")
    lines[start + 1 : end] = syllabus_table(course)
    return "\n".join(lines).rstrip("\n") + "\n"


def build(course: Course, out: Path) -> list[BuiltTree]:
    """Write ``out/student`` and ``out/answers``; same sources give the same bytes.

    Everything is checked before anything is written: a lesson's broken checks.py or rubric.yml, or
    a site file without its generated parts, leaves the previous build in place.
    """
    check_solutions(course)
    generated = {CONFIG: site_config(course)}
    if (course.root / INDEX).is_file():
        generated[INDEX] = site_index(course)
    results = []
    for tree in TREES:
        dest = out / tree
        if dest.exists():
            shutil.rmtree(dest)
        (dest / "lessons").mkdir(parents=True)
        written: list[str] = []
        for src in _site_files(course.root, tree):
            if src.name in generated:
                (dest / src.name).write_text(generated[src.name], encoding="utf-8")
            else:
                shutil.copyfile(src, dest / src.name)
            written.append(src.name)
        released = []
        for slug, lesson in sorted(course.lessons.items()):
            show = tree == "answers" or course.released(slug)
            if show:
                released.append(slug)
            source = submit_link(lesson_source(lesson, show), course.service.service_url, slug)
            (dest / "lessons" / f"{slug}.qmd").write_text(source, encoding="utf-8")
            (dest / "lessons" / f"{slug}.ipynb").write_text(dumps(build_notebook(lesson)), encoding="utf-8")
            written += [f"lessons/{slug}.qmd", f"lessons/{slug}.ipynb"]
        assets = course.root / "lessons" / "assets"
        if assets.is_dir():
            shutil.copytree(assets, dest / "lessons" / "assets")
            written += sorted(str(p.relative_to(dest)) for p in (dest / "lessons" / "assets").rglob("*") if p.is_file())
        results.append(BuiltTree(tree, dest, sorted(written), released))
    return results
