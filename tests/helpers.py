"""Helpers to make submissions of lesson 4 for grading tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat

from grader.course import Course
from grader.notebook import build_notebook, dumps
from grader.rubric import Rubric, load_rubric

REPO = Path(__file__).resolve().parents[1]


def lesson_rubric(course: Course, slug: str) -> Rubric:
    """A lesson's rubric, named as the grader and the build name it (so all of them share one load)."""
    return load_rubric(course.solutions_dir(slug) / "rubric.yml", f"solutions/{slug}/rubric.yml")


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


# --- an ordinary user with a checkout of their own (sandbox user-namespace mode) ----------------
ORDINARY_USER = "course-sandbox-ci"
_USER_CACHE = Path("/var/tmp/course-ordinary-user")


class UserCheckout:
    """A copy of this working tree owned by an ordinary user, set up by that user with scripts/setup."""

    def __init__(self, user: str, root: Path, home: Path) -> None:
        self.user = user
        self.root = root  # the copy; its .venv was made by the user
        self.home = home

    @property
    def python(self) -> Path:
        return self.root / ".venv/bin/python"

    def run(self, argv: list[str], **kwargs: Any) -> Any:
        """Run ``argv`` as the user, in the copy, with a clean environment (a CompletedProcess)."""
        import subprocess

        return subprocess.run(
            ["runuser", "-u", self.user, "--", "env", "-i", *user_env(self.home), *argv],
            cwd=self.root,
            capture_output=True,
            text=True,
            **kwargs,
        )

    def popen(self, argv: list[str], **kwargs: Any) -> Any:
        """Start ``argv`` as the user (a Popen)."""
        import subprocess

        return subprocess.Popen(
            ["runuser", "-u", self.user, "--", "env", "-i", *user_env(self.home), *argv],
            cwd=self.root,
            text=True,
            **kwargs,
        )


def user_env(home: Path) -> list[str]:
    """The environment an ordinary user's shell would have: Debian's PATH, no root venv, and the
    machine's pip settings (package index, proxy) passed on so scripts/setup can install."""
    import os

    keep = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k.lower().endswith("_proxy")}
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **_pip_settings(), **keep}
    return [f"{k}={v}" for k, v in env.items()]


_PIP_SETTINGS: dict[str, str] = {}


def _pip_settings() -> dict[str, str]:
    """pip's settings as this process sees them (root's own pip.conf included, which the user
    cannot read), as PIP_* variables: the same package index for both."""
    import subprocess
    import sys

    if _PIP_SETTINGS:
        return _PIP_SETTINGS
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    settings = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        section, _, name = key.partition(".")
        if section in ("global", ":env:") and name and value.startswith("'") and value.endswith("'"):
            settings["PIP_" + name.upper().replace("-", "_")] = value[1:-1]
    _PIP_SETTINGS.update(settings)
    return settings


def _working_tree_files() -> list[str]:
    """Files of this working tree as a fresh clone plus uncommitted work would have them."""
    import subprocess

    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    return [f for f in out.decode().split("\0") if f and (REPO / f).is_file()]


def ordinary_user_checkout() -> UserCheckout:
    """Create the ordinary user if needed, copy this tree to a folder it owns, and run scripts/setup
    as that user. Needs root. The venv is kept under /var/tmp by pyproject hash, so a machine pays
    the install once; the sources are copied afresh every time."""
    import hashlib
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0:
        raise PermissionError("creating an ordinary user needs root")
    if subprocess.run(["id", "-u", ORDINARY_USER], capture_output=True).returncode != 0:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ORDINARY_USER],
            check=True,
            capture_output=True,
        )
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:16]
    base = _USER_CACHE / digest
    # The home (pip's cache) is shared by every pyproject version: a changed pyproject reinstalls
    # from the cache.
    root, home = base / "repo", _USER_CACHE / "home"
    _USER_CACHE.mkdir(mode=0o755, exist_ok=True)
    base.mkdir(mode=0o755, exist_ok=True)
    for folder in (root, home):
        folder.mkdir(exist_ok=True)
    for entry in root.iterdir():  # fresh sources, kept venv
        if entry.name != ".venv":
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for name in _working_tree_files():
        dest = root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest)
    subprocess.run(["chown", "-R", f"{ORDINARY_USER}:", str(base), str(home)], check=True)
    checkout = UserCheckout(ORDINARY_USER, root, home)
    setup = checkout.run(["bash", "scripts/setup"], timeout=1800)
    if setup.returncode != 0:
        raise RuntimeError(f"scripts/setup failed as {ORDINARY_USER}:\n{setup.stderr[-3000:]}")
    return checkout
