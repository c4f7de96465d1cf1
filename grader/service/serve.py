"""``course serve``: migrate, start the grading engine, serve the app with uvicorn.

The engine is one setting (``Settings.engine``). ``embedded`` starts and supervises worker
processes on this machine; ``celery`` starts the dispatcher instead, which hands the job table's
jobs to the broker for ``course worker`` processes on any host (``distributed.py``). The web app is
the same either way; only the upload store differs (files, or the database every host reaches).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from ..course import Course, load_course
from ..errors import CourseError
from .db import check_database, make_engine, migrate, session_factory
from .settings import ENGINES, Settings
from .staff import run_due_releases
from .store import UploadStore
from .web import create_app
from .worker import Supervisor

RELEASE_CHECK_S = 5.0
DISPATCH_EVERY_S = 1.0


@dataclass
class Grading:
    """A running grading engine: how many workers answer now, and how to stop it."""

    describe: str
    workers: Callable[[], int | None]
    stop: Callable[[], None]


def open_database(settings: Settings) -> Engine:
    """The database, migrated; with the distributed engine, checked first (a one-line error if unreachable)."""
    if settings.engine not in ENGINES:
        raise CourseError(f"--engine: {settings.engine!r} is not one of {', '.join(ENGINES)}")
    if settings.engine == "celery":
        from .celery_app import check_broker

        if not settings.database_url or not settings.broker_url:
            raise CourseError(
                "--engine celery needs --db (PostgreSQL that every worker host reaches) and --broker (Redis); "
                "see docs/service.md, 'More machines'"
            )
        engine = check_database(settings.database_url)
        check_broker(settings.broker_url)
    else:
        engine = make_engine(settings.db_url)
    migrate(engine)
    return engine


def start_embedded(settings: Settings) -> Grading:
    supervisor = Supervisor(settings, settings.workers)
    supervisor.start()
    return Grading(f"workers: {settings.workers}", supervisor.alive, supervisor.stop)


def start_dispatcher(settings: Settings, course: Course, factory: sessionmaker[Session]) -> Grading:
    """The dispatcher in a thread: sends due jobs to the broker every second until stopped."""
    from . import celery_app, distributed, metrics

    assert settings.broker_url is not None  # open_database checked it
    celery = celery_app.make_app(settings.broker_url)
    dispatcher = distributed.Dispatcher(factory, course, celery_app.sender(celery))
    stop = threading.Event()
    last = [""]

    def log(line: str) -> None:  # once per new complaint, not every second while the broker is away
        if line != last[0]:
            print(f"course serve: {line}", file=sys.stderr)
            last[0] = line

    thread = threading.Thread(
        target=dispatcher.run, args=(stop, DISPATCH_EVERY_S, log), name="course-dispatcher", daemon=True
    )
    thread.start()

    def halt() -> None:
        stop.set()
        thread.join(30)

    count = metrics.Cached(lambda: celery_app.worker_count(celery))
    return Grading(f"engine: celery, broker {celery_app.shown(settings.broker_url)}", count, halt)


def serve(settings: Settings, host: str, port: int, demo: bool = False) -> None:
    course = load_course(settings.course_root)
    settings.data.mkdir(parents=True, exist_ok=True)
    engine = open_database(settings)
    factory = session_factory(engine)
    if settings.engine == "celery":
        from .distributed import DatabaseUploads

        store: UploadStore = DatabaseUploads(factory)
    else:
        store = UploadStore(settings.uploads)
        store.remove_temp_files()
    if demo:
        from . import demo as demo_data

        if demo_data.seed(factory, store, settings.course_root):
            print("course serve: demo data seeded", file=sys.stderr)
        print(
            f"course serve: demo accounts: student {demo_data.STUDENT[0]} / {demo_data.STUDENT[1]}, "
            f"instructor {demo_data.INSTRUCTOR[0]} / {demo_data.INSTRUCTOR[1]}",
            file=sys.stderr,
        )
    grading = start_dispatcher(settings, course, factory) if settings.engine == "celery" else start_embedded(settings)
    app = create_app(settings, course, grading.workers)
    stop = threading.Event()

    def releases() -> None:
        while not stop.wait(RELEASE_CHECK_S):
            try:
                for slug in run_due_releases(factory, course):
                    print(f"course serve: {slug}: answers released (scheduled)", file=sys.stderr)
            except Exception as exc:  # noqa: BLE001 - a failed check is retried on the next tick
                print(f"course serve: scheduled release: {exc}", file=sys.stderr)

    threading.Thread(target=releases, name="course-releases", daemon=True).start()
    print(f"course serve: http://{host}:{port}/  (data: {settings.data}, {grading.describe})", file=sys.stderr)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False)
    finally:
        stop.set()
        grading.stop()
