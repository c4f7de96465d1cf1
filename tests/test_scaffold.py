"""`course new`: a new lesson loads cleanly from the first minute and says what is left to write."""

from __future__ import annotations

import re

import pytest

from grader.checks import load_checks
from grader.course import load_course
from grader.errors import SourceError
from grader.rubric import example_outcomes, load_rubric, score_answer
from grader.scaffold import TODO, lesson_files, new_lesson, todo_markers


def test_scaffold_loads_like_a_finished_lesson(scratch_course):
    written = new_lesson(scratch_course, "lesson13", "序列并行 SP")
    assert written == [scratch_course / name for name in lesson_files("lesson13")]
    course = load_course(scratch_course)
    lesson = course.lessons["lesson13"]
    assert lesson.title == "第 13 课：序列并行 SP" and lesson.number == 13
    assert lesson.selfcheck is not None and lesson.selfcheck_hints is not None
    checks = load_checks(lesson, scratch_course / "solutions/lesson13", "solutions/lesson13/checks.py")
    assert len(checks) >= 6 and sum(c.points for c in checks) == 4
    rubric = load_rubric(scratch_course / "solutions/lesson13/rubric.yml", "solutions/lesson13/rubric.yml")
    assert len(rubric.vetoes) >= 3 and all(len(v.fire) >= 5 and len(v.keep) >= 5 for v in rubric.vetoes)
    # The placeholders agree with each other, so `course check` has only the TODO marks to report.
    assert all((kind == "fire") == fired for _, kind, _, fired in example_outcomes(rubric))
    for qid in ("q1", "q2", "q3"):
        assert score_answer(rubric, qid, "\n".join(lesson.keypoints(qid))).points == 2


def test_todo_markers_list_every_part_left_to_write(scratch_course):
    new_lesson(scratch_course, "lesson13", "序列并行 SP")
    markers = todo_markers(scratch_course, "lesson13")
    for name in lesson_files("lesson13"):
        text = (scratch_course / name).read_text(encoding="utf-8")
        lines = [i for i, line in enumerate(text.splitlines(), start=1) if TODO in line]
        assert [int(m.split(":")[1]) for m in markers if m.startswith(f"{name}:")] == lines
    assert all(re.match(r"^[\w/.]+:\d+: TODO\(course\): \S", m) for m in markers)
    assert any("playbook" in m for m in markers) and any(
        m.startswith("solutions/lesson13/rubric.yml:") for m in markers
    )
    assert not any(m.endswith(('"]', "-->", '"""')) for m in markers)


def test_todo_markers_shrink_as_the_author_writes(scratch_course):
    new_lesson(scratch_course, "lesson13", "序列并行 SP")
    before = todo_markers(scratch_course, "lesson13")
    path = scratch_course / "lessons/lesson13.qmd"
    path.write_text(
        path.read_text(encoding="utf-8").replace("TODO(course): 第一个问题。", "为什么要切分序列？"), encoding="utf-8"
    )
    after = todo_markers(scratch_course, "lesson13")
    assert len(after) == len(before) - 1 and not any("第一个问题" in m for m in after)
    assert todo_markers(scratch_course, "lesson04") == []


def test_scaffolded_lesson_builds(scratch_course):
    from grader.build import build

    new_lesson(scratch_course, "lesson13", "序列并行 SP")
    trees = build(load_course(scratch_course), scratch_course / "_build")
    assert all("lessons/lesson13.ipynb" in tree.files for tree in trees)


def test_refuses_to_overwrite(scratch_course):
    rubric = scratch_course / "solutions/lesson04/rubric.yml"
    before = rubric.read_bytes()
    with pytest.raises(SourceError) as info:
        new_lesson(scratch_course, "lesson04", "数据并行")
    assert str(info.value).startswith("lessons/lesson04.qmd: already exists")
    assert rubric.read_bytes() == before


def test_refuses_when_any_of_the_three_files_exists(scratch_course):
    (scratch_course / "solutions/lesson14").mkdir()
    (scratch_course / "solutions/lesson14/rubric.yml").write_text("draft\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"^solutions/lesson14/rubric\.yml: already exists"):
        new_lesson(scratch_course, "lesson14", "上下文并行")
    assert not (scratch_course / "lessons/lesson14.qmd").exists()


@pytest.mark.parametrize("slug", ["lesson7", "lesson007", "Lesson07", "lesson00", "07", "lesson07.qmd"])
def test_refuses_a_malformed_slug(scratch_course, slug):
    with pytest.raises(SourceError, match="'lesson' plus two digits"):
        new_lesson(scratch_course, slug, "标题")
    with pytest.raises(SourceError):
        todo_markers(scratch_course, slug)


@pytest.mark.parametrize("title", ["", "   ", "一行\n两行"])
def test_refuses_a_bad_title(scratch_course, title):
    with pytest.raises(SourceError, match="one non-empty line"):
        new_lesson(scratch_course, "lesson13", title)


def test_keeps_a_title_that_already_has_its_number(scratch_course):
    new_lesson(scratch_course, "lesson13", "第 13 课：序列并行 SP")
    assert load_course(scratch_course).lessons["lesson13"].title == "第 13 课：序列并行 SP"


def test_refuses_outside_a_course(tmp_path):
    with pytest.raises(SourceError, match="run the command from the course root"):
        new_lesson(tmp_path, "lesson13", "序列并行 SP")


def test_course_check_on_a_new_lesson_lists_only_what_is_left_to_write(scratch_course, capsys):
    from grader.cli import main

    assert main(["--root", str(scratch_course), "new", "lesson19", "--title", "测试"]) == 0
    assert "course check lesson19" in capsys.readouterr().out
    assert main(["--root", str(scratch_course), "check", "lesson19", "--no-sandbox"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("lesson19: still to be written")
    assert len(lines) > 5 and all(TODO in line for line in lines[1:])
