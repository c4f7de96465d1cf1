"""Releasing answers and publishing the branches, as an instructor does at a deadline."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import git

from grader.cli import main


@pytest.fixture
def repo(scratch_course: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The scratch course as a git repository with one commit."""
    for var in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(var, "Course Tests")
    for var in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(var, "tests@example.invalid")
    (scratch_course / ".gitignore").write_text("_build/\n", encoding="utf-8")
    git(scratch_course, "init", "-q", "-b", "main")
    git(scratch_course, "add", "-A")
    git(scratch_course, "commit", "-qm", "sources")
    return scratch_course


def publish(repo: Path, *extra: str) -> int:
    return main(["--root", str(repo), "publish", "--out", str(repo.parent / "out"), *extra])


def test_publish_refuses_a_dirty_tree_and_names_the_source_commit(repo, capsys):
    (repo / "draft.txt").write_text("untracked\n", encoding="utf-8")
    assert publish(repo) == 2
    err = capsys.readouterr().err
    assert "uncommitted changes" in err and "draft.txt" in err and "--allow-dirty" in err
    assert git(repo, "branch", "--list", "student").strip() == ""  # nothing was committed

    (repo / "draft.txt").unlink()
    head = git(repo, "rev-parse", "HEAD").strip()
    assert publish(repo) == 0
    assert head in git(repo, "log", "-1", "--format=%B", "student")
    assert head in git(repo, "log", "-1", "--format=%B", "answers")


def test_allow_dirty_publishes_without_touching_the_work_tree_and_says_so(repo):
    (repo / "notes.txt").write_text("uncommitted work\n", encoding="utf-8")
    git(repo, "add", "notes.txt")
    (repo / "draft.txt").write_text("untracked\n", encoding="utf-8")
    before = (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD"))
    assert publish(repo, "--allow-dirty") == 0
    assert (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")) == before
    assert "with uncommitted changes" in git(repo, "log", "-1", "--format=%B", "student")
    student = git(repo, "ls-tree", "-r", "--name-only", "student").split()
    assert "lessons/lesson04.ipynb" in student and not any(n.startswith("solutions") for n in student)
    tips = git(repo, "rev-parse", "student", "answers")
    assert publish(repo, "--allow-dirty") == 0  # nothing changed: no new commits
    assert git(repo, "rev-parse", "student", "answers") == tips


def test_release_of_a_lesson_without_an_entry_keeps_order_and_comments(scratch_course, capsys):
    config = scratch_course / "_quarto.yml"
    text = config.read_text(encoding="utf-8")
    # An instructor who has never released lesson 6 has no entry for it.
    without = "\n".join(line for line in text.splitlines() if line.strip() != "lesson06: hidden") + "\n"
    config.write_text(without, encoding="utf-8")
    assert main(["--root", str(scratch_course), "answers", "release", "lesson06"]) == 0
    assert "course build" in capsys.readouterr().out  # says what to run next
    lines = config.read_text(encoding="utf-8").splitlines()
    at = lines.index("    lesson06: released")
    assert lines[at - 1].strip() == "lesson05: hidden"
    assert lines[at + 1].lstrip().startswith("# Resource limits")  # the limits comment stays above limits:
    assert main(["--root", str(scratch_course), "answers", "hide", "lesson06"]) == 0
    assert "    lesson06: hidden" in config.read_text(encoding="utf-8").splitlines()
