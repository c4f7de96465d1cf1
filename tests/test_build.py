"""`course build`, the answer toggle and `course publish`, as an instructor uses them."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import nbformat
from conftest import git

from grader.build import build
from grader.cli import main
from grader.course import load_course
from grader.lesson import Lesson


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


def test_publish_commits_branches_without_touching_the_work_tree(scratch_course, monkeypatch):
    for var in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(var, "Course Tests")
    for var in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(var, "tests@example.invalid")
    git(scratch_course, "init", "-q", "-b", "main")
    git(scratch_course, "add", "-A")
    git(scratch_course, "commit", "-qm", "sources")
    (scratch_course / "notes.txt").write_text("uncommitted work\n")
    git(scratch_course, "add", "notes.txt")
    (scratch_course / "draft.txt").write_text("untracked\n")
    before = (git(scratch_course, "status", "--porcelain"), git(scratch_course, "rev-parse", "HEAD"))

    env_args = ["--root", str(scratch_course), "publish", "--out", str(scratch_course.parent / "out")]
    assert main(env_args) == 0
    assert (git(scratch_course, "status", "--porcelain"), git(scratch_course, "rev-parse", "HEAD")) == before
    assert git(scratch_course, "branch", "--show-current").strip() == "main"
    student = git(scratch_course, "ls-tree", "-r", "--name-only", "student").split()
    assert "lessons/lesson04.ipynb" in student and not any(n.startswith("solutions") for n in student)
    tips = git(scratch_course, "rev-parse", "student", "answers")

    assert main(env_args) == 0  # nothing changed: no new commits
    assert git(scratch_course, "rev-parse", "student", "answers") == tips
    assert git(scratch_course, "rev-list", "--count", "student").strip() == "1"


def test_build_reports_bad_lesson_without_traceback(scratch_course, capsys):
    path = scratch_course / "lessons/lesson04.qmd"
    path.write_text(path.read_text(encoding="utf-8").replace("#| eval: false\n", "", 1), encoding="utf-8")
    assert main(["--root", str(scratch_course), "build"]) == 2
    err = capsys.readouterr().err
    assert re.match(r"course: error: lessons/lesson04\.qmd:\d+: an exercise cell needs '#\| eval: false'", err)
