"""The built lessons as pandoc (the engine under Quarto) reads them: structure and the answer block."""

from __future__ import annotations

import json
import re

import pypandoc
import pytest
from helpers import REPO

from grader.build import build
from grader.course import load_course


def blocks(text: str) -> tuple[dict, list]:
    # Quarto turns executable cells (```{python}) into ordinary code blocks before pandoc sees them.
    text = re.sub(r"^```\{python\}", "```{.python .cell}", text, flags=re.M)
    ast = json.loads(pypandoc.convert_text(text, "json", format="markdown"))
    found: list = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("t") in ("Div", "CodeBlock"):
                found.append((node["t"], node["c"][0], node["c"][1] if node["t"] == "CodeBlock" else None))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(ast["blocks"])
    return ast["meta"], found


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    out = tmp_path_factory.mktemp("built")
    course = load_course(REPO)
    build(course, out)
    return course, out


def test_pandoc_reads_each_lesson_with_its_questions_and_front_matter(trees):
    course, out = trees
    for tree in ("student", "answers"):
        for slug, lesson in course.lessons.items():
            meta, found = blocks((out / tree / "lessons" / f"{slug}.qmd").read_text(encoding="utf-8"))
            assert {"title", "lesson", "prerequisites", "playbook"} <= set(meta)
            div_ids = [attrs[0] for kind, attrs, _ in found if kind == "Div"]
            assert [d for d in div_ids if d in ("q1", "q2", "q3")] == ["q1", "q2", "q3"]
            code = "\n".join(text for kind, _, text in found if kind == "CodeBlock")
            assert all(ex.code.strip() in code for ex in lesson.exercises)


def test_answer_block_is_absent_for_pandoc_in_the_student_tree(trees):
    course, out = trees
    for slug, lesson in course.lessons.items():
        solution = lesson.solutions[0].code.strip()
        _, student = blocks((out / "student/lessons" / f"{slug}.qmd").read_text(encoding="utf-8"))
        _, answers = blocks((out / "answers/lessons" / f"{slug}.qmd").read_text(encoding="utf-8"))
        roles = lambda found: [dict(attrs[2]).get("course_role") for kind, attrs, _ in found if kind == "Div"]  # noqa: E731
        assert "answer" not in roles(student) and "keypoints" not in roles(student)
        assert roles(answers).count("answer") == 1 and roles(answers).count("keypoints") == 3
        assert not any(text and solution in text for _, _, text in student)
        assert any(text and solution in text for _, _, text in answers)


def test_pandoc_reads_the_generated_syllabus_as_one_table(trees):
    course, out = trees
    ast = json.loads(
        pypandoc.convert_text((out / "student/index.qmd").read_text(encoding="utf-8"), "json", format="markdown")
    )
    div = next(b for b in ast["blocks"] if b["t"] == "Div" and b["c"][0][0] == "syllabus")
    table = next(b for b in div["c"][1] if b["t"] == "Table")
    widths = [spec[1]["c"] for spec in table["c"][2]]
    assert [round(w, 2) for w in widths] == [0.12, 0.38, 0.32, 0.18]  # no one-character first column
    rows = table["c"][4][0][3]
    assert len(rows) == len(course.lessons)


def test_self_check_is_visible_in_the_student_tree(trees):
    course, out = trees
    for slug, lesson in course.lessons.items():
        _, found = blocks((out / "student/lessons" / f"{slug}.qmd").read_text(encoding="utf-8"))
        assert "selfcheck-hints" in [dict(attrs[2]).get("course_role") for kind, attrs, _ in found if kind == "Div"]
        code = [text for kind, _, text in found if kind == "CodeBlock"]
        assert any("#| course_role: selfcheck" in text and lesson.selfcheck.code.strip() in text for text in code)
