"""`course build`, the answer toggle and `course publish`, as an instructor uses them."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import nbformat

from grader.build import build
from grader.cli import main
from grader.course import load_course
from grader.lesson import Lesson
from grader.scaffold import new_lesson
from grader.yamlio import load_yaml


def built_text(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): p.read_text(encoding="utf-8") for p in sorted(tree.rglob("*")) if p.is_file()}


def secret_lines(lesson: Lesson) -> list[str]:
    """Lines that only the answer part contains: solution code and key points not shown elsewhere."""
    block = lesson.answer_blocks[0]
    visible = "\n".join(lesson.lines[: block.line - 1] + lesson.lines[block.end_line :])
    candidates = [c.code for c in lesson.solutions] + ["\n".join(lesson.keypoints(q)) for q in ("q1", "q2", "q3")]
    lines = {line.strip() for text in candidates for line in text.splitlines()}
    return sorted(line for line in lines if len(line) > 3 and line not in visible)


def digest(tree: Path) -> str:
    h = hashlib.sha256()
    for name, text in built_text(tree).items():
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()


def test_student_tree_leaks_no_solution_and_answer_tree_has_all(repo, tmp_path):
    course = load_course(repo)
    build(course, tmp_path)
    student, answers = built_text(tmp_path / "student"), built_text(tmp_path / "answers")
    for slug, lesson in course.lessons.items():
        secrets = secret_lines(lesson)
        assert len(secrets) > 10, f"{slug}: too few solution-only lines to make this test meaningful"
        for name, text in student.items():
            leaked = [s for s in secrets if s in text]
            assert not leaked, f"{name} leaks {slug}'s solution: {leaked[:3]}"
        answer_source = answers[f"lessons/{slug}.qmd"]
        assert all(s in answer_source for s in secrets)
    assert not any(name.startswith(("solutions", "grader", "tests")) for name in student)
    assert "_quarto-answers.yml" not in student and "_quarto-answers.yml" in answers


def test_student_notebook_is_valid_and_addressable(repo, tmp_path):
    build(load_course(repo), tmp_path)
    nb = nbformat.read(tmp_path / "student/lessons/lesson04.ipynb", as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.course.lesson == "lesson04"
    roles = [(c.metadata.course.role, c.metadata.course.id, c.cell_type) for c in nb.cells]
    assert ("exercise", "ex-dp", "code") in roles
    assert [r for r in roles if r[0] == "answer"] == [("answer", q, "markdown") for q in ("q1", "q2", "q3")]
    # The self-check follows the exercise and comes before the questions.
    assert roles[1:4] == [
        ("exercise", "ex-dp", "code"),
        ("selfcheck-hints", "selfcheck-hints", "markdown"),
        ("selfcheck", "selfcheck", "code"),
    ]
    selfcheck = next(c for c in nb.cells if c.metadata.course.role == "selfcheck")
    assert "gbs_tokens(2, 4, 128, 4096) == 4194304" in selfcheck.source and "#|" not in selfcheck.source
    exercise = next(c for c in nb.cells if c.metadata.course.role == "exercise")
    assert "______" in exercise.source and "#|" not in exercise.source
    assert all(c.id == c.metadata.course.id for c in nb.cells)


def test_build_is_deterministic(repo, tmp_path):
    course = load_course(repo)
    build(course, tmp_path / "a")
    build(course, tmp_path / "b")
    for tree in ("student", "answers"):
        assert digest(tmp_path / "a" / tree) == digest(tmp_path / "b" / tree)


def test_built_trees_are_quarto_projects(repo, tmp_path):
    build(load_course(repo), tmp_path)
    for tree in ("student", "answers"):
        text = built_text(tmp_path / tree)
        assert "_quarto.yml" in text and "index.qmd" in text
        for link in re.findall(r"\]\((lessons/[^)]+)\)", text["index.qmd"]):
            assert link in text, f"{tree}: syllabus link {link} does not resolve"
        for lesson in re.findall(r"^\s+- (lessons/[^*\s]+\.qmd)", text["_quarto.yml"], re.M):
            assert lesson in text, f"{tree}: sidebar entry {lesson} does not resolve"


def test_release_and_hide_toggle_the_student_tree(scratch_course):
    config = scratch_course / "_quarto.yml"
    original = config.read_text(encoding="utf-8")
    out = scratch_course / "_build"
    secret = secret_lines(load_course(scratch_course).lessons["lesson04"])[0]

    assert main(["--root", str(scratch_course), "answers", "release", "lesson04"]) == 0
    assert "lesson04: released" in config.read_text(encoding="utf-8")
    assert main(["--root", str(scratch_course), "build"]) == 0
    released = (out / "student/lessons/lesson04.qmd").read_text(encoding="utf-8")
    assert secret in released and "when-profile" not in released.split("## 参考答案")[0].splitlines()[-2]

    assert main(["--root", str(scratch_course), "answers", "hide", "lesson04"]) == 0
    assert config.read_text(encoding="utf-8") == original  # comments and layout kept byte for byte
    assert main(["--root", str(scratch_course), "build"]) == 0
    assert all(secret not in t for t in built_text(out / "student").values())


def test_toggle_rejects_unknown_lesson(scratch_course, capsys):
    assert main(["--root", str(scratch_course), "answers", "release", "lesson99"]) == 2
    assert "no lesson 'lesson99'" in capsys.readouterr().err


def test_build_reports_bad_lesson_without_traceback(scratch_course, capsys):
    path = scratch_course / "lessons/lesson04.qmd"
    path.write_text(path.read_text(encoding="utf-8").replace("#| eval: false\n", "", 1), encoding="utf-8")
    assert main(["--root", str(scratch_course), "build"]) == 2
    err = capsys.readouterr().err
    assert re.match(r"course: error: lessons/lesson04\.qmd:\d+: an exercise cell needs '#\| eval: false'", err)


def sidebar_lessons(config_text: str) -> list[str]:
    config = load_yaml(config_text, "_quarto.yml")
    section = next(e for e in config["website"]["sidebar"]["contents"] if "section" in e)
    return section["contents"]


def test_new_lesson_appears_in_sidebar_and_syllabus_without_editing_them(scratch_course):
    sources = {name: (scratch_course / name).read_bytes() for name in ("_quarto.yml", "index.qmd")}
    numbers = sorted(lesson.number for lesson in load_course(scratch_course).lessons.values()) + [13]
    new_lesson(scratch_course, "lesson13", "序列并行 SP")
    assert main(["--root", str(scratch_course), "build"]) == 0
    for tree in ("student", "answers"):
        built = built_text(scratch_course / "_build" / tree)
        assert sidebar_lessons(built["_quarto.yml"]) == [f"lessons/lesson{n:02d}.qmd" for n in numbers]
        rows = [line for line in built["index.qmd"].splitlines() if line.startswith("| 第 ")]
        assert [row.split(" | ")[0] for row in rows] == [f"| 第 {n} 课" for n in numbers]
        assert rows[-1].startswith("| 第 13 课 | [序列并行 SP](lessons/lesson13.qmd) | ")
        assert (
            "| [第 3 课](lessons/lesson03.qmd)、[第 5 课](lessons/lesson05.qmd) |" in rows[5]
        )  # lesson 6's prerequisites
        assert "course_role" not in built["_quarto.yml"] and "course:" in built["_quarto.yml"]
    assert {name: (scratch_course / name).read_bytes() for name in sources} == sources


def test_built_index_keeps_its_prose(repo, tmp_path):
    build(load_course(repo), tmp_path)
    source = (repo / "index.qmd").read_text(encoding="utf-8")
    built = (tmp_path / "student/index.qmd").read_text(encoding="utf-8")
    prose = [
        line for line in source.splitlines() if line.strip() and "syllabus" not in line and not line.startswith("<!--")
    ]
    assert all(line in built.splitlines() for line in prose)
    assert "{#syllabus}" in built and '{tbl-colwidths="[' in built


def test_build_stops_on_a_broken_checks_file(scratch_course, capsys):
    path = scratch_course / "solutions/lesson04/checks.py"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines.insert(9, "def broken(:")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["--root", str(scratch_course), "build"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("course: error: solutions/lesson04/checks.py:10: cannot import: SyntaxError"), err
    assert not (scratch_course / "_build").exists()


def test_build_stops_without_a_rubric(scratch_course, capsys):
    (scratch_course / "solutions/lesson02/rubric.yml").unlink()
    assert main(["--root", str(scratch_course), "build"]) == 2
    assert capsys.readouterr().err.startswith("course: error: solutions/lesson02/rubric.yml: missing rubric.yml")


def test_build_stops_on_a_malformed_rubric(scratch_course, capsys):
    path = scratch_course / "solutions/lesson05/rubric.yml"
    path.write_text(path.read_text(encoding="utf-8").replace("points: 0.5", "points: many", 1), encoding="utf-8")
    assert main(["--root", str(scratch_course), "build"]) == 2
    assert re.match(r"course: error: solutions/lesson05/rubric\.yml:\d+: key point .*'points'", capsys.readouterr().err)


def test_build_needs_the_syllabus_marker(scratch_course, capsys):
    index = scratch_course / "index.qmd"
    index.write_text(index.read_text(encoding="utf-8").replace("::: {#syllabus}", "::: {#plan}"), encoding="utf-8")
    assert main(["--root", str(scratch_course), "build"]) == 2
    assert "index.qmd: needs exactly one '::: {#syllabus}'" in capsys.readouterr().err


def test_build_needs_the_generated_sidebar_section(scratch_course, capsys):
    config = scratch_course / "_quarto.yml"
    text = config.read_text(encoding="utf-8").replace("contents: []", "contents: [lessons/lesson01.qmd]")
    config.write_text(text, encoding="utf-8")
    assert main(["--root", str(scratch_course), "build"]) == 2
    line = next(i for i, raw in enumerate(text.splitlines(), start=1) if raw.strip() == "sidebar:")
    assert f"_quarto.yml:{line}: website.sidebar needs exactly one" in capsys.readouterr().err


def test_answer_tree_labels_each_key_point_list_with_its_question(repo):
    from grader.build import lesson_source

    for lesson in load_course(repo).lessons.values():
        text = lesson_source(lesson, show_answers=True)
        for n in (1, 2, 3):
            opening = f'::: {{course_role="keypoints" question="q{n}"}}\n**问题 {n} 的要点**\n'
            assert opening in text, (lesson.slug, n)
        assert "问题 1 的要点" not in lesson_source(lesson, show_answers=False)
