"""The parser accepts the authoring contract and rejects each kind of malformed source with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.course import load_course
from grader.errors import SourceError
from grader.lesson import parse_lesson


def write(tmp_path: Path, text: str, name: str = "lesson09.qmd") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


def expect_error(path: Path, line: int | None, fragment: str) -> None:
    with pytest.raises(SourceError) as info:
        parse_lesson(path)
    err = info.value
    assert err.path == str(path)
    assert err.line == line, str(err)
    assert fragment in err.problem, str(err)
    assert str(err).startswith(f"{path}:{line}: " if line else f"{path}: ")


def test_valid_lesson_model(tmp_path, lesson_text):
    lesson = parse_lesson(write(tmp_path, lesson_text))
    assert lesson.slug == "lesson09" and lesson.number == 9
    assert [c.id for c in lesson.exercises] == ["ex-add"]
    assert lesson.exercises[0].line == line_of(lesson_text, "```{python}")
    assert lesson.exercises[0].options["eval"] is False
    assert lesson.solution_for("ex-add").code.strip().endswith("# SECRET-SOLUTION-LINE")
    assert [q.id for q in lesson.questions] == ["q1", "q2", "q3"]
    assert lesson.question_text("q2") == "问题二？"
    assert lesson.keypoints("q1") == ["要点一 SECRET-KEYPOINT"]
    block = lesson.answer_blocks[0]
    assert block.line == line_of(lesson_text, 'course_role="answer"')
    assert block.end_line == len(lesson_text.splitlines())


def test_unclosed_code_fence(tmp_path, lesson_text):
    text = lesson_text.replace("    return ______\n```", "    return ______\n")
    expect_error(write(tmp_path, text), line_of(text, "```{python}"), "never closed")


def test_unclosed_div(tmp_path, lesson_text):
    text = lesson_text.replace("问题三？\n:::", "问题三？\n")
    expect_error(write(tmp_path, text), line_of(text, "#q3"), "never closed")


def test_stray_div_close(tmp_path, lesson_text):
    text = lesson_text.replace("概念。", "概念。\n:::")
    expect_error(write(tmp_path, text), line_of(text, "概念。") + 1, "never opened")


def test_unknown_cell_role(tmp_path, lesson_text):
    text = lesson_text.replace("#| course_role: exercise", "#| course_role: exercize")
    expect_error(write(tmp_path, text), line_of(text, "exercize"), "unknown course_role 'exercize'")


def test_unknown_div_role(tmp_path, lesson_text):
    text = lesson_text.replace('{#q2 course_role="question"}', '{#q2 course_role="quiz"}')
    expect_error(write(tmp_path, text), line_of(text, "#q2"), "unknown course_role 'quiz'")


def test_duplicate_id(tmp_path, lesson_text):
    text = lesson_text.replace("#| label: ref-add", "#| label: ex-add")
    expect_error(write(tmp_path, text), line_of(text, "solves: ex-add") - 3, "duplicate id 'ex-add'")


def test_missing_exercise(tmp_path, lesson_text):
    text = lesson_text.replace("#| course_role: exercise\n", "")
    expect_error(write(tmp_path, text), line_of(text, "## 代码填空题"), "no exercise cell")


def test_missing_questions(tmp_path, lesson_text):
    text = lesson_text.replace('::: {#q3 course_role="question"}\n问题三？\n:::\n', "")
    expect_error(write(tmp_path, text), line_of(text, "## 三个问答题"), "exactly three questions")


def test_bad_yaml_front_matter(tmp_path, lesson_text):
    text = lesson_text.replace('playbook: ["Testing"]', 'playbook: ["Testing"')
    path = write(tmp_path, text)
    with pytest.raises(SourceError) as info:
        parse_lesson(path)
    assert info.value.line in (5, 6) and "invalid YAML" in info.value.problem
    assert str(info.value).startswith(f"{path}:")


def test_bad_yaml_cell_options(tmp_path, lesson_text):
    text = lesson_text.replace("#| eval: false\ndef add", "#| eval: [false\ndef add")
    expect_error(write(tmp_path, text), line_of(text, "#| eval: [false"), "invalid YAML")


def test_solution_outside_answer_block(tmp_path, lesson_text):
    moved = "```{python}\n#| label: ref-add\n#| course_role: solution\n#| solves: ex-add\ndef add(a, b):\n    return a + b  # SECRET-SOLUTION-LINE\n```\n"
    text = lesson_text.replace(moved, "").replace("## 检查与通过标准", moved + "\n## 检查与通过标准")
    expect_error(write(tmp_path, text), line_of(text, "#| label: ref-add") - 1, "must sit inside the answer block")


def test_exercise_must_not_be_evaluated(tmp_path, lesson_text):
    text = lesson_text.replace("#| eval: false\ndef add", "def add")
    expect_error(write(tmp_path, text), line_of(text, "#| label: ex-add") - 1, "eval: false")


def test_exercise_without_solution(tmp_path, lesson_text):
    text = lesson_text.replace("#| solves: ex-add", "#| solves: ex-other")
    expect_error(write(tmp_path, text), line_of(text, "#| label: ref-add") - 1, "solves")


def test_answer_block_needs_profile_guard(tmp_path, lesson_text):
    text = lesson_text.replace(
        '{.content-visible when-profile="answers" course_role="answer"}', '{course_role="answer"}'
    )
    expect_error(write(tmp_path, text), line_of(text, 'course_role="answer"'), "content-visible")


def test_front_matter_number_matches_file(tmp_path, lesson_text):
    expect_error(write(tmp_path, lesson_text, "lesson08.qmd"), 1, "file name says 8")


def test_missing_section(tmp_path, lesson_text):
    text = lesson_text.replace("## 核心概念", "## 概念")
    expect_error(write(tmp_path, text), 1, "missing section '## 核心概念'")


def test_solutions_folder_without_lesson(scratch_course):
    (scratch_course / "solutions" / "lesson17").mkdir()
    with pytest.raises(SourceError) as info:
        load_course(scratch_course)
    assert str(info.value).startswith("solutions/lesson17: ")
    assert "no matching lesson" in str(info.value) and "lessons/lesson17.qmd" in str(info.value)


def test_release_entry_for_unknown_lesson(scratch_course):
    config = scratch_course / "_quarto.yml"
    config.write_text(
        config.read_text(encoding="utf-8").replace("lesson04: hidden", "lesson04: hidden\n    lesson16: released"),
        encoding="utf-8",
    )
    with pytest.raises(SourceError) as info:
        load_course(scratch_course)
    assert str(info.value).startswith(f"_quarto.yml:{line_of(config.read_text(encoding='utf-8'), 'lesson16:')}: ")


def test_bad_release_state(scratch_course):
    config = scratch_course / "_quarto.yml"
    config.write_text(
        config.read_text(encoding="utf-8").replace("lesson04: hidden", "lesson04: maybe"), encoding="utf-8"
    )
    with pytest.raises(SourceError) as info:
        load_course(scratch_course)
    assert "must be 'hidden' or 'released'" in str(info.value)
    assert str(info.value).startswith(f"_quarto.yml:{line_of(config.read_text(encoding='utf-8'), 'lesson04:')}: ")


def test_every_bundled_lesson_parses(repo):
    course = load_course(repo)
    assert "lesson04" in course.lessons


SELFCHECK_CELL = '```{python}\n#| label: selfcheck\n#| course_role: selfcheck\n#| eval: false\nassert add(2, 3) == 5, "add：add(2, 3) 应为 5"\n```\n'


def test_selfcheck_parts_are_in_the_model(tmp_path, lesson_text):
    lesson = parse_lesson(write(tmp_path, lesson_text))
    assert lesson.selfcheck is not None and lesson.selfcheck.code.strip().startswith("assert add(2, 3) == 5")
    assert lesson.selfcheck.line == line_of(lesson_text, "#| label: selfcheck") - 1
    assert lesson.selfcheck_hints is not None and "`add(2, 3)` 应为 5" in lesson.selfcheck_hints.body


def test_selfcheck_is_optional(tmp_path, lesson_text):
    text = lesson_text.replace(SELFCHECK_CELL, "")
    assert parse_lesson(write(tmp_path, text)).selfcheck is None


def test_selfcheck_needs_eval_false(tmp_path, lesson_text):
    text = lesson_text.replace("#| course_role: selfcheck\n#| eval: false\n", "#| course_role: selfcheck\n")
    expect_error(write(tmp_path, text), line_of(text, "#| label: selfcheck") - 1, "needs '#| eval: false'")


def test_selfcheck_needs_its_label(tmp_path, lesson_text):
    text = lesson_text.replace("#| label: selfcheck\n", "#| label: check-mine\n")
    expect_error(write(tmp_path, text), line_of(text, "#| label: check-mine") - 1, "'#| label: selfcheck'")


def test_only_one_selfcheck(tmp_path, lesson_text):
    text = lesson_text.replace(
        "## 三个问答题", SELFCHECK_CELL.replace("selfcheck\n#| course", "selfcheck-2\n#| course") + "\n## 三个问答题"
    )
    expect_error(write(tmp_path, text), line_of(text, "selfcheck-2") - 1, "a second self-check cell")


def test_selfcheck_outside_the_answer_block(tmp_path, lesson_text):
    text = lesson_text.replace(SELFCHECK_CELL, "").replace("## 参考答案\n", "## 参考答案\n\n" + SELFCHECK_CELL)
    expect_error(write(tmp_path, text), line_of(text, "#| label: selfcheck") - 1, "move it out of the answer block")


def test_selfcheck_hints_outside_the_answer_block(tmp_path, lesson_text):
    hints = '::: {course_role="selfcheck-hints"}\n**自查提示。** `add(2, 3)` 应为 5。\n:::\n'
    text = lesson_text.replace(hints, "").replace("## 参考答案\n", "## 参考答案\n\n" + hints)
    expect_error(write(tmp_path, text), line_of(text, "selfcheck-hints"), "move it out of the answer block")


def test_selfcheck_after_the_exercise(tmp_path, lesson_text):
    text = lesson_text.replace(SELFCHECK_CELL, "").replace("## 代码填空题\n", "## 代码填空题\n\n" + SELFCHECK_CELL)
    expect_error(write(tmp_path, text), line_of(text, "#| label: selfcheck") - 1, "must come after the exercise")


def test_selfcheck_syntax_error_points_at_its_line(tmp_path, lesson_text):
    text = lesson_text.replace('assert add(2, 3) == 5, "add', 'assert add(2, 3) == 5,, "add')
    expect_error(write(tmp_path, text), line_of(text, "== 5,,"), "not valid Python")


def test_exercise_cannot_take_a_notebook_id(tmp_path, lesson_text):
    text = lesson_text.replace("#| label: ex-add", "#| label: intro").replace("#| solves: ex-add", "#| solves: intro")
    expect_error(write(tmp_path, text), line_of(text, "#| label: intro") - 1, "used by the notebook itself")


def test_prerequisites_name_earlier_lessons(tmp_path, lesson_text):
    text = lesson_text.replace("prerequisites: []", "prerequisites: [3, 12]")
    expect_error(write(tmp_path, text), line_of(text, "prerequisites:"), "lesson numbers before 9")


def test_a_label_with_a_quarto_crossref_prefix_is_refused(tmp_path, lesson_text):
    text = lesson_text.replace("#| label: ref-add", "#| label: sol-add")
    expect_error(write(tmp_path, text), line_of(text, "#| label: sol-add") - 1, "cross-reference")
