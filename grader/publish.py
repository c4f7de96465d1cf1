"""Commit each built tree to its own branch without touching the working tree, index or HEAD.

Plain git plumbing: a throw-away index file, ``write-tree``, ``commit-tree`` and ``update-ref``.
A tree identical to the branch tip makes no commit, so publishing is idempotent.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from .errors import CourseError


def _git(repo: Path, *args: str, env: dict[str, str] | None = None, work_tree: Path | None = None) -> str:
    if work_tree is None:
        cmd = ["git", "-C", str(repo)]
    else:
        git_dir = _git(repo, "rev-parse", "--absolute-git-dir")
        cmd = ["git", "-C", str(work_tree), "--git-dir", git_dir, "--work-tree", str(work_tree)]
    proc = subprocess.run(cmd + list(args), capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise CourseError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def publish_tree(repo: Path, tree_dir: Path, branch: str, message: str) -> str | None:
    """Commit ``tree_dir`` as the whole content of ``branch``; return the new commit or None."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, GIT_INDEX_FILE=str(Path(tmp) / "index"))
        _git(repo, "add", "--all", "--force", ".", env=env, work_tree=tree_dir)
        tree = _git(repo, "write-tree", env=env)
    ref = f"refs/heads/{branch}"
    exists = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", ref], capture_output=True, text=True
    )
    parent = exists.stdout.strip() if exists.returncode == 0 else None
    if parent and _git(repo, "rev-parse", f"{parent}^{{tree}}") == tree:
        return None
    commit = _git(repo, "commit-tree", tree, *(["-p", parent] if parent else []), "-m", message)
    _git(repo, "update-ref", ref, commit, *([parent] if parent else []))
    return commit


def source_state(repo: Path, allow_dirty: bool) -> str:
    """The commit the trees are built from, for the publish message; refuse a dirty tree unless allowed.

    A published student branch must be reproducible from a commit: uncommitted edits (a half-written
    solution, a rubric being tuned) would otherwise reach students without a trace.
    """
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", "HEAD"], capture_output=True, text=True
    )
    commit = head.stdout.strip() if head.returncode == 0 else "no commit yet"
    dirty = _git(repo, "status", "--porcelain", "--untracked-files=normal")
    if dirty and not allow_dirty:
        first = dirty.splitlines()[:5]
        raise CourseError(
            "the working tree has uncommitted changes, so the published trees would match no commit:\n  "
            + "\n  ".join(first)
            + "\ncommit them first, or pass --allow-dirty"
        )
    return f"{commit} (with uncommitted changes)" if dirty else commit


def repo_root(path: Path) -> Path:
    proc = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise CourseError(
            f"{path} is not inside a git repository: run 'git init' first, or publish from the course repo"
        )
    return Path(proc.stdout.strip())
