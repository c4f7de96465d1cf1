"""``course serve``: migrate, start and supervise the workers, serve the app with uvicorn."""

from __future__ import annotations

import sys
import threading

import uvicorn

from ..course import load_course
from .db import make_engine, migrate, session_factory
from .settings import Settings
from .staff import run_due_releases
from .store import UploadStore
from .web import create_app
from .worker import Supervisor

RELEASE_CHECK_S = 5.0


def serve(settings: Settings, host: str, port: int, demo: bool = False) -> None:
    course = load_course(settings.course_root)
    settings.data.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.db_url)
    migrate(engine)
    factory = session_factory(engine)
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
    app = create_app(settings, course)
    supervisor = Supervisor(settings, settings.workers)
    supervisor.start()
    stop = threading.Event()

    def releases() -> None:
        while not stop.wait(RELEASE_CHECK_S):
            try:
                for slug in run_due_releases(factory, course):
                    print(f"course serve: {slug}: answers released (scheduled)", file=sys.stderr)
            except Exception as exc:  # noqa: BLE001 - a failed check is retried on the next tick
                print(f"course serve: scheduled release: {exc}", file=sys.stderr)

    threading.Thread(target=releases, name="course-releases", daemon=True).start()
    print(f"course serve: http://{host}:{port}/  (data: {settings.data}, workers: {settings.workers})", file=sys.stderr)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False)
    finally:
        stop.set()
        supervisor.stop()
