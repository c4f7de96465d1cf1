"""The ``course`` command: build, publish, release answers, grade, try a rubric, serve.

Every user error is a CourseError and is printed as one line (``file:line: problem``), never as a
traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import CourseError


def _course(args: argparse.Namespace):
    from .course import load_course

    return load_course(args.root)


def cmd_build(args: argparse.Namespace) -> int:
    from .build import build

    course = _course(args)
    out = Path(args.out) if args.out else course.root / "_build"
    for tree in build(course, out):
        shown = ", ".join(tree.released) or "none"
        print(f"built {tree.name:8} {tree.path}  ({len(tree.files)} files; answers shown: {shown})")
    return 0


def cmd_answers(args: argparse.Namespace) -> int:
    from .release import set_release

    course = _course(args)
    changed = set_release(course, args.lesson, args.action == "release")
    state = "released" if args.action == "release" else "hidden"
    print(f"{args.lesson}: answers {state}" + ("" if changed else " (unchanged)"))
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from .build import build
    from .publish import publish_tree, repo_root

    course = _course(args)
    repo = repo_root(course.root)
    out = Path(args.out) if args.out else course.root / "_build"
    for tree in build(course, out):
        commit = publish_tree(repo, tree.path, tree.name, f"Publish the {tree.name} tree")
        print(f"{tree.name:8} " + (f"committed {commit[:12]}" if commit else "unchanged, no commit"))
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course", description="Build, publish and grade the course.")
    parser.add_argument("--root", default=".", help="course root, the folder holding _quarto.yml (default: .)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build", help="write the student and answer trees with their notebooks")
    p.add_argument("--out", help="output folder (default: _build)")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("answers", help="release or hide a lesson's answers in the student tree")
    p.add_argument("action", choices=["release", "hide"])
    p.add_argument("lesson", help="lesson slug, e.g. lesson04")
    p.set_defaults(func=cmd_answers)

    p = sub.add_parser("publish", help="build, then commit each tree to its branch (student, answers)")
    p.add_argument("--out", help="build folder (default: _build)")
    p.set_defaults(func=cmd_publish)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return args.func(args)
    except CourseError as exc:
        print(f"course: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("course: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
