"""Every lesson end to end, as `course check` sees it: reference 10/10 with no veto, untouched
notebook 0 on code, key points 2/2 per question, at least 6 hidden tests and 3 vetoes, and every
veto example behaving as labelled."""

from __future__ import annotations

import pytest
from helpers import REPO

from grader.build import build
from grader.course import load_course
from grader.grade import Grader
from grader.selfcheck import check_lesson

COURSE = load_course(REPO)


@pytest.fixture(scope="module")
def grader():
    g = Grader(COURSE, sandbox=True)
    yield g
    g.close()


@pytest.mark.parametrize("slug", sorted(COURSE.lessons))
def test_lesson_is_sound(grader, slug):
    problems, _ = check_lesson(grader, slug)
    assert problems == []


def test_built_syllabus_and_sidebar_list_every_lesson(tmp_path):
    build(COURSE, tmp_path)
    index = (tmp_path / "student/index.qmd").read_text(encoding="utf-8")
    config = (tmp_path / "student/_quarto.yml").read_text(encoding="utf-8")
    for slug in COURSE.lessons:
        assert f"](lessons/{slug}.qmd)" in index and f"- lessons/{slug}.qmd" in config


def test_every_lesson_has_a_self_check():
    for slug, lesson in COURSE.lessons.items():
        assert lesson.selfcheck is not None and lesson.selfcheck_hints is not None, slug
        assert lesson.selfcheck_hints.line < lesson.selfcheck.line, slug
