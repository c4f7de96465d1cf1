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


def cmd_grade(args: argparse.Namespace) -> int:
    import json

    from .batch import default_jobs, grade_many
    from .grade import load_overrides
    from .report import gradebook_csv, table, write_reports
    from .sandbox import check_available

    course = _course(args)
    paths = [Path(p) for p in args.notebooks]
    if args.lesson:
        course.lesson(args.lesson)
    overrides = load_overrides(Path(args.overrides), course) if args.overrides else {}
    if not args.no_sandbox:
        check_available()
    results = grade_many(
        course,
        paths,
        jobs=args.jobs or default_jobs(),
        sandbox=not args.no_sandbox,
        lesson=args.lesson,
        overrides=overrides,
    )
    if args.json:
        for r in results:
            print(json.dumps(r, ensure_ascii=False, sort_keys=True))
    if args.report:
        write_reports(results, Path(args.report))
    if args.csv:
        Path(args.csv).write_text(gradebook_csv(results), encoding="utf-8")
    if args.table or not args.json:
        print(table(results))
    return 0


def cmd_rubric(args: argparse.Namespace) -> int:
    import json

    from .rubric import load_rubric, score_answer

    course = _course(args)
    course.lesson(args.lesson)
    rel = f"solutions/{args.lesson}/rubric.yml"
    rubric = load_rubric(course.solutions_dir(args.lesson) / "rubric.yml", rel)
    source = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8")
    bad = 0
    with source:
        for n, line in enumerate(source, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                if (
                    not isinstance(entry, dict)
                    or entry.get("question") not in ("q1", "q2", "q3")
                    or not isinstance(entry.get("text"), str)
                ):
                    raise ValueError('each line must be {"question": "q1|q2|q3", "text": "..."}')
            except ValueError as exc:
                print(f"course: error: {args.input}:{n}: {exc}", file=sys.stderr)
                bad += 1
                continue
            print(json.dumps(score_answer(rubric, entry["question"], entry["text"]).as_dict(), ensure_ascii=False))
    return 2 if bad else 0


def cmd_check(args: argparse.Namespace) -> int:
    from .sandbox import check_available
    from .selfcheck import check_course

    course = _course(args)
    slugs = args.lessons or sorted(course.lessons)
    for slug in slugs:
        course.lesson(slug)
    if not args.no_sandbox:
        check_available()
    failed = 0
    for slug, (problems, seconds) in check_course(course, slugs, sandbox=not args.no_sandbox).items():
        failed += bool(problems)
        print(f"{slug}: {'FAIL' if problems else 'ok'} (reference graded in {seconds:.2f} s)")
        for p in problems:
            print(f"  - {p}")
    return 1 if failed else 0


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

    p = sub.add_parser("grade", help="grade submitted notebooks")
    p.add_argument("notebooks", nargs="+", help="submitted .ipynb files")
    p.add_argument("--lesson", help="grade every notebook as this lesson (default: the lesson named in each notebook)")
    p.add_argument("--json", action="store_true", help="print one JSON result per notebook")
    p.add_argument("--report", metavar="DIR", help="write each student's feedback as Markdown and HTML")
    p.add_argument("--csv", metavar="FILE", help="write a gradebook CSV")
    p.add_argument("--table", action="store_true", help="print the results table (the default without --json)")
    p.add_argument("--jobs", type=int, default=0, help="parallel graders (default: number of cores)")
    p.add_argument("--overrides", metavar="FILE", help="instructor overrides (YAML), see docs/grading.md")
    p.add_argument("--no-sandbox", action="store_true", help="run student code without bubblewrap (trusted code only)")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("check", help="check lessons end to end: reference 10/10, untouched 0, rubric examples")
    p.add_argument("lessons", nargs="*", help="lesson slugs (default: all)")
    p.add_argument("--no-sandbox", action="store_true", help="run without bubblewrap")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("rubric", help="try a lesson's rubric on sample answers (JSON lines)")
    p.add_argument("lesson", help="lesson slug, e.g. lesson04")
    p.add_argument(
        "--input", required=True, help='JSON-lines file of {"question": "q1", "text": "..."}, or - for stdin'
    )
    p.set_defaults(func=cmd_rubric)
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
