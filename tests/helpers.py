"""Helpers to make submissions of lesson 4 for grading tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat

from grader.course import Course
from grader.notebook import build_notebook, dumps

REPO = Path(__file__).resolve().parents[1]


def reference_code(course: Course, slug: str = "lesson04") -> str:
    lesson = course.lessons[slug]
    return "\n".join(lesson.solution_for(ex.id).code for ex in lesson.exercises)


def submission(
    course: Course,
    slug: str = "lesson04",
    *,
    code: str | None = None,
    answers: dict[str, str] | None = None,
    mutate: Callable[[nbformat.NotebookNode], Any] | None = None,
) -> bytes:
    """The reference notebook of a lesson, with the exercise code and/or answers replaced."""
    lesson = course.lessons[slug]
    nb = build_notebook(lesson, reference=True)
    for cell in nb.cells:
        role = cell.metadata["course"]["role"]
        if role == "exercise" and code is not None:
            cell.source = code
        if role == "answer" and answers and cell.id in answers:
            cell.source = answers[cell.id]
    if mutate is not None:
        mutate(nb)
    return dumps(nb).encode("utf-8")


def item(result: dict[str, Any], ident: str) -> dict[str, Any]:
    return next(i for i in result["items"] if i["id"] == ident)


def as_json(result: dict[str, Any]) -> str:
    return json.dumps(result, ensure_ascii=False, sort_keys=True)


SAMPLE_IDS = {
    "reference": "2026001",
    "untouched": "2026002",
    "wrong-function": "2026003",
    "syntax-error": "2026004",
    "vetoed-answer": "2026005",
    "partial-answers": "2026006",
}


def sample(situation: str) -> Path:
    """The bundled sample notebook of one situation (examples/make_samples.py writes them)."""
    return REPO / "examples/submissions/lesson04" / SAMPLE_IDS[situation] / "lesson04.ipynb"
