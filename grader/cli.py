"""The ``course`` command: build, publish, release answers, grade, try a rubric, serve the course service.

Every user error is a CourseError and is printed as one line (``file:line: problem``), never as a
traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import CourseError
from .service.settings import ENGINES


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
    if changed:
        print("next: run `course build` to see it in _build/student, or `course publish` to commit the student branch")
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from .build import build
    from .publish import publish_tree, repo_root, source_state

    course = _course(args)
    repo = repo_root(course.root)
    source = source_state(repo, args.allow_dirty)
    out = Path(args.out) if args.out else course.root / "_build"
    for tree in build(course, out):
        commit = publish_tree(repo, tree.path, tree.name, f"Publish the {tree.name} tree from {source}")
        print(f"{tree.name:8} " + (f"committed {commit[:12]}" if commit else "unchanged, no commit"))
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    """Grade a batch. Exit 0: all graded; 1: some files could not be graded; 2: the course or command is at fault."""
    import json

    from .batch import default_jobs, grade_many, plan
    from .grade import Grader
    from .overrides import check_targets, load_overrides
    from .report import table, write_csv, write_reports
    from .sandbox import check_available

    course = _course(args)
    if args.lesson:
        course.lesson(args.lesson)
    _check_outputs(args)
    roster = course.roster(Path(args.roster) if args.roster else None)
    entries = plan(course, [Path(p) for p in args.notebooks], roster)
    lessons = {args.lesson} if args.lesson else {e.lesson for e in entries if e.lesson in course.lessons}
    preload = Grader(course, sandbox=False)  # loads checks.py and rubric.yml: a broken one stops here
    kits = [preload.kit(slug) for slug in sorted(x for x in lessons if x)]
    overrides = {}
    if args.overrides:
        overrides = load_overrides(Path(args.overrides))
        students = set(roster.students) if roster else set()
        students |= {e.student for e in entries if e.student}
        veto_ids = {v.id for kit in kits for v in kit.rubric.vetoes}
        check_targets(overrides, args.overrides, students, {e.sha256 for e in entries if e.sha256}, veto_ids)
    if not args.no_sandbox:
        check_available()
    results = grade_many(
        course, entries, jobs=args.jobs or default_jobs(), sandbox=not args.no_sandbox, lesson=args.lesson,
        overrides=overrides,
    )  # fmt: skip
    if args.json:
        for r in results:
            print(json.dumps(r, ensure_ascii=False, sort_keys=True))
    if args.report:
        write_reports(results, Path(args.report))
    if args.csv:
        write_csv(results, Path(args.csv))
    if args.table or not args.json:
        print(table(results))
    return _summarise(results)


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse output paths that cannot be written before any grading starts."""
    import os

    if args.csv:
        csv_path = Path(args.csv)
        parent = csv_path.parent if str(csv_path.parent) else Path(".")
        if csv_path.is_dir():
            raise CourseError(f"{args.csv}: is a folder; --csv takes a file name, e.g. {args.csv}/gradebook.csv")
        if not parent.is_dir():
            raise CourseError(f"{args.csv}: folder {parent} does not exist; create it first")
        if not os.access(parent, os.W_OK) or (csv_path.exists() and not os.access(csv_path, os.W_OK)):
            raise CourseError(f"{args.csv}: cannot write here (permission denied)")
    if args.report:
        folder = Path(args.report)
        if folder.exists() and not folder.is_dir():
            raise CourseError(
                f"{args.report}: exists and is not a folder; --report takes a folder for the feedback files"
            )
        existing = next((p for p in [folder, *folder.parents] if p.exists()), Path("."))
        if not os.access(existing, os.W_OK):
            raise CourseError(f"{args.report}: cannot write here (permission denied)")


def _summarise(results: list[dict]) -> int:
    """Tell the instructor on stderr what needs attention, and choose the exit code."""
    ungraded = [r for r in results if not r.get("graded")]
    faults = [f for r in results for f in r.get("course_faults", [])]
    flagged = [r for r in results if r.get("flags")]
    for r in flagged:
        for flag in r["flags"]:
            print(f"course: note: {r.get('file')}: {flag}", file=sys.stderr)
    if ungraded:
        print(f"course: {len(ungraded)} of {len(results)} submission(s) could not be graded:", file=sys.stderr)
        for r in ungraded:
            print(f"  {r.get('file')}: {(r.get('errors') or ['?'])[0]}", file=sys.stderr)
    if faults:
        print(f"course: error: the course is at fault in {len(faults)} place(s); fix it and regrade:", file=sys.stderr)
        for fault in dict.fromkeys(faults):
            print(f"  {fault}", file=sys.stderr)
        return 2
    return 1 if ungraded else 0


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


def cmd_new(args: argparse.Namespace) -> int:
    from .scaffold import new_lesson

    root = Path(args.root).resolve()
    for path in new_lesson(root, args.lesson, args.title):
        print(f"wrote {path.relative_to(root)}")
    print(f"next: fill in every TODO(course), then run `course check {args.lesson}`")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from .sandbox import check_available
    from .scaffold import todo_markers
    from .selfcheck import check_course

    course = _course(args)
    slugs = args.lessons or sorted(course.lessons)
    for slug in slugs:
        course.lesson(slug)
    unfinished = {slug: todo_markers(course.root, slug) for slug in slugs}
    for slug, todos in unfinished.items():
        if todos:
            print(f"{slug}: still to be written ({len(todos)} TODO(course) markers):")
            for todo in todos:
                print(f"  - {todo}")
    slugs = [s for s in slugs if not unfinished[s]]
    if not slugs:
        return 1
    if not args.no_sandbox:
        check_available()
    failed = 0
    for slug, (problems, seconds) in check_course(course, slugs, sandbox=not args.no_sandbox).items():
        failed += bool(problems)
        print(f"{slug}: {'FAIL' if problems else 'ok'} (reference graded in {seconds:.2f} s)")
        for p in problems:
            print(f"  - {p}")
    return 1 if failed or any(unfinished.values()) else 0


def _settings(args: argparse.Namespace, workers: int = 2, **extra: object):
    """The service's settings from ``--data`` (else ``$COURSE_DATA``, else ``./.course-data``) and
    ``--db`` (else ``$COURSE_DATABASE_URL``, else SQLite in the data folder)."""
    from .service.settings import DATABASE_ENV, Settings, data_dir

    db = getattr(args, "db", None) or os.environ.get(DATABASE_ENV) or None
    root = Path(args.root).resolve()
    return Settings(data=data_dir(args.data), course_root=root, database_url=db, workers=workers, **extra)  # type: ignore[arg-type]


def cmd_serve(args: argparse.Namespace) -> int:
    from .sandbox import check_available
    from .service.serve import serve
    from .service.settings import BROKER_ENV

    broker = args.broker or os.environ.get(BROKER_ENV) or None
    if args.engine == "embedded" and args.broker:
        raise CourseError("--broker is used only with --engine celery")
    if args.engine == "embedded" and not args.no_sandbox:
        check_available()  # with celery, the web host runs no student code: the workers check it
    extra = {"sandbox": not args.no_sandbox, "secure_cookies": args.secure_cookies}
    settings = _settings(args, args.workers, engine=args.engine, broker_url=broker, **extra)
    serve(settings, args.host, args.port, demo=args.demo)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from .sandbox import check_available
    from .service.settings import BROKER_ENV, DATABASE_ENV

    db = args.db or os.environ.get(DATABASE_ENV)
    broker = args.broker or os.environ.get(BROKER_ENV)
    if not db or not broker:
        missing = " and ".join(name for name, value in (("--db", db), ("--broker", broker)) if not value)
        raise CourseError(
            f"course worker needs {missing} (or ${DATABASE_ENV} / ${BROKER_ENV}): the database and the broker "
            "that `course serve --engine celery` uses"
        )
    if not args.no_sandbox:
        check_available()
    from .service.celery_app import start_worker

    if args.prefork and (args.no_sandbox or os.geteuid() != 0):
        raise CourseError("--prefork needs the sandbox in root mode (see docs/security.md, 'Pre-forked kernels')")
    start_worker(Path(args.root).resolve(), db, broker, not args.no_sandbox, args.lease, args.name, args.prefork)
    return 0


def _open_db(args: argparse.Namespace):
    from .service.db import make_engine, migrate, session_factory

    settings = _settings(args)
    settings.data.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.db_url)
    migrate(engine)
    return session_factory(engine)


def cmd_roster_import(args: argparse.Namespace) -> int:
    from .roster import load_roster
    from .service.accounts import import_roster, invitations_csv

    roster = load_roster(Path(args.roster), args.roster)
    if args.codes and Path(args.codes).exists():
        raise CourseError(f"{args.codes}: exists already; invitation codes are written to a new file only")
    with _open_db(args).begin() as session:
        made, kept = import_roster(session, roster)
    text = invitations_csv(made)
    if args.codes:
        Path(args.codes).write_text(text, encoding="utf-8-sig")
        print(f"{len(made)} student(s) created; invitation codes written to {args.codes}")
    else:
        print(text, end="")
    if kept:
        print(f"{len(kept)} already had an account and were left as they are: {', '.join(kept)}", file=sys.stderr)
    return 0


def cmd_user_add(args: argparse.Namespace) -> int:
    from .service.accounts import add_user

    with _open_db(args).begin() as session:
        made = add_user(session, args.username, args.role, args.name or "")
    print(f"{made.username} ({made.role}): invitation code {made.code}")
    print("log in with it once at /login to set a password")
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    from .service.backup import backup

    target, copied = backup(_settings(args), Path(args.out))
    print(f"database copied to {target}; {copied} upload(s) copied to {Path(args.out) / 'uploads'}")
    return 0


def _bounded(
    convert: Callable[[str], float], low: float, high: float, what: str, unit: str = ""
) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text and insist on ``low <= value <= high``, in words a user can act on."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low:g} to {high:g}{unit}, got {value:g}")
        return value

    return parse


_port = _bounded(int, 1, 65535, "a port number")
_seconds = _bounded(float, 3, 3600, "a number of seconds", " seconds")
_jobs = _bounded(int, 1, 64, "a whole number from 1 to 64")


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
    p.add_argument("--allow-dirty", action="store_true", help="publish even with uncommitted changes")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser(
        "grade",
        help="grade submitted notebooks",
        description="Grade submitted notebooks. The student of each file is read from its path (see docs/grading.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit status:\n"
        "  0 every submission was graded (fails included)\n"
        "  1 some submissions could not be graded (they are listed on stderr)\n"
        "  2 the course or the command is at fault (bad rubric or checks.py, bad overrides,\n"
        "    unknown lesson, output paths that cannot be written)",
    )
    p.add_argument("notebooks", nargs="+", help="submitted .ipynb files")
    p.add_argument("--lesson", help="grade every notebook as this lesson (default: the lesson named in each notebook)")
    p.add_argument("--json", action="store_true", help="print one JSON result per notebook")
    p.add_argument("--report", metavar="DIR", help="write each student's feedback as Markdown and HTML")
    p.add_argument("--csv", metavar="FILE", help="write a gradebook CSV")
    p.add_argument("--table", action="store_true", help="print the results table (the default without --json)")
    p.add_argument("--jobs", type=_jobs, default=0, help="parallel graders, 1-64 (default: number of cores)")
    p.add_argument("--roster", metavar="FILE", help="roster CSV (student,name[,email]); default: course.roster")
    p.add_argument("--overrides", metavar="FILE", help="instructor overrides (YAML), see docs/grading.md")
    p.add_argument("--no-sandbox", action="store_true", help="run student code without bubblewrap (trusted code only)")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("new", help="write a lesson skeleton with its checks.py and rubric.yml, parts to write marked")
    p.add_argument("lesson", help="lesson slug, e.g. lesson07")
    p.add_argument("--title", required=True, help='the lesson title, e.g. "第 7 课：序列并行 SP"')
    p.set_defaults(func=cmd_new)

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

    data_help = "data folder (database, uploads); default: $COURSE_DATA, else ./.course-data"
    db_help = "database URL, e.g. postgresql+psycopg://course:SECRET@db:5432/course (default: $COURSE_DATABASE_URL, else SQLite in the data folder)"
    broker_help = "Celery broker URL, e.g. redis://:SECRET@10.0.0.5:6379/0 (default: $COURSE_BROKER_URL)"
    p = sub.add_parser("serve", help="run the course service: web app, grading workers, SQLite (docs/service.md)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8000, help="port (default: 8000)")
    p.add_argument("--data", help=data_help)
    p.add_argument("--demo", action="store_true", help="seed a demo roster, two accounts and the sample submissions")
    p.add_argument("--workers", type=_jobs, default=2, help="embedded grading worker processes, 1-64 (default: 2)")
    p.add_argument("--secure-cookies", action="store_true", help="mark cookies Secure (when served over https)")
    p.add_argument("--no-sandbox", action="store_true", help="run student code without bubblewrap (trusted code only)")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="embedded",
        help="who grades: worker processes of this command (default), or `course worker` hosts through Celery",
    )
    p.add_argument("--db", help=db_help)
    p.add_argument("--broker", help=broker_help + "; --engine celery only")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "worker",
        help="grade for `course serve --engine celery`: one grading process on this host (docs/service.md)",
    )
    p.add_argument("--root", default=argparse.SUPPRESS, help="the course checkout to grade with (default: .)")
    p.add_argument("--db", help=db_help.replace(", else SQLite in the data folder", ""))
    p.add_argument("--broker", help=broker_help)
    p.add_argument("--name", help="this worker's name in results and logs (default: the host name)")
    p.add_argument("--lease", type=_seconds, default=30.0, help="seconds a claim lasts unrenewed (default: 30)")
    p.add_argument("--no-sandbox", action="store_true", help="run student code without bubblewrap (trusted code only)")
    p.add_argument(
        "--prefork", action="store_true", help="fork each kernel from a warm zygote: 3x less CPU (root mode only)"
    )
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("roster", help="service accounts from a roster")
    roster_sub = p.add_subparsers(dest="roster_command", required=True)
    q = roster_sub.add_parser("import", help="create students with one-time invitation codes")
    q.add_argument("roster", help="roster CSV (student,name[,email])")
    q.add_argument("--data", help=data_help)
    q.add_argument("--codes", metavar="FILE", help="write the invitation codes to this new CSV (default: print them)")
    q.set_defaults(func=cmd_roster_import)

    p = sub.add_parser("user", help="service accounts for staff")
    user_sub = p.add_subparsers(dest="user_command", required=True)
    q = user_sub.add_parser("add", help="add an account (e.g. an instructor) and print its invitation code")
    q.add_argument("username")
    q.add_argument("--role", required=True, choices=["student", "ta", "instructor"])
    q.add_argument("--name", help="the name shown in the service")
    q.add_argument("--data", help=data_help)
    q.add_argument("--db", help=db_help)
    q.set_defaults(func=cmd_user_add)

    p = sub.add_parser("backup", help="copy a (running) service's database and uploads to OUT")
    p.add_argument("out", help="backup folder (created)")
    p.add_argument("--data", help=data_help)
    p.set_defaults(func=cmd_backup)
    return parser


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a last guard: never crash on printing odd text
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
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
