"""Build the student tree and the answer tree from the course sources.

The student tree is the dangerous one: it must not contain solution text. It is therefore built by
*allow-listing*: only site files are copied, and each lesson's answer block is cut out of the source
before anything else sees it. Nothing from ``solutions/``, ``grader/`` or ``tests/`` is ever copied.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from .course import Course
from .lesson import Lesson
from .notebook import build_notebook, dumps

TREES = ("student", "answers")
_REVEALED_OPENING = '::: {course_role="answer"}'


@dataclass(frozen=True)
class BuiltTree:
    name: str
    path: Path
    files: list[str]
    released: list[str]  # lessons whose answers this tree shows


def lesson_source(lesson: Lesson, show_answers: bool) -> str:
    """The lesson's .qmd for one tree: answer block removed, or kept and made visible."""
    lines = list(lesson.lines)
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


def _site_files(root: Path, tree: str) -> list[Path]:
    """Top-level site files that belong in a tree (never solutions, code or tests)."""
    keep = [root / "_quarto.yml", root / f"_quarto-{tree}.yml"]
    keep += sorted(root.glob("*.qmd")) + sorted(root.glob("*.css")) + sorted(root.glob("*.scss"))
    return [p for p in keep if p.is_file()]


def build(course: Course, out: Path) -> list[BuiltTree]:
    """Write ``out/student`` and ``out/answers``; same sources give the same bytes."""
    results = []
    for tree in TREES:
        dest = out / tree
        if dest.exists():
            shutil.rmtree(dest)
        (dest / "lessons").mkdir(parents=True)
        written: list[str] = []
        for src in _site_files(course.root, tree):
            shutil.copyfile(src, dest / src.name)
            written.append(src.name)
        released = []
        for slug, lesson in sorted(course.lessons.items()):
            show = tree == "answers" or course.released(slug)
            if show:
                released.append(slug)
            (dest / "lessons" / f"{slug}.qmd").write_text(lesson_source(lesson, show), encoding="utf-8")
            (dest / "lessons" / f"{slug}.ipynb").write_text(dumps(build_notebook(lesson)), encoding="utf-8")
            written += [f"lessons/{slug}.qmd", f"lessons/{slug}.ipynb"]
        assets = course.root / "lessons" / "assets"
        if assets.is_dir():
            shutil.copytree(assets, dest / "lessons" / "assets")
            written += sorted(str(p.relative_to(dest)) for p in (dest / "lessons" / "assets").rglob("*") if p.is_file())
        results.append(BuiltTree(tree, dest, sorted(written), released))
    return results
