"""Grading workers: separate OS processes that claim jobs and run ``tasks.grade_submission``.

``course serve`` starts N of them and supervises them (``Supervisor``): a worker that dies is
restarted, and its running job is put back in the queue at once. Each worker owns one ``Grader``
(sandbox on), which keeps a kernel warm between jobs.

Test-only hook: ``COURSE_TEST_WORKER_PAUSE=<seconds>`` makes a worker wait that long after claiming a
job and before grading it, so that a test can kill it mid-job. Never set it in production.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from ..course import load_course, load_settings
from ..grade import Grader
from . import queue
from .db import make_engine, session_factory
from .settings import Settings
from .store import UploadStore
from .tasks import give_up, grade_submission

PREFIX = "embedded/"
PAUSE_ENV = "COURSE_TEST_WORKER_PAUSE"
IDLE_SLEEP_S = 0.2
WORKER_NICENESS = 10


def step(
    factory: sessionmaker[Session], store: UploadStore, grader: Grader, me: str, lease_s: float, pause: float = 0
) -> bool:
    """Claim one job and see it through; False when the queue is empty.

    A job claimed more than ``queue.MAX_ATTEMPTS`` times has killed its worker each time: it gets a
    result that says so, and is not run again.
    """
    job = queue.claim(factory, me, lease_s)
    if job is None:
        return False
    if job.attempts > queue.MAX_ATTEMPTS:
        give_up(factory, job.submission_id, job.job_id)
        return True
    if pause:
        time.sleep(pause)
    root = grader.course.root
    grader.course.releases = load_settings(root)[1]  # answers released (or hidden) since start count
    grade_submission(factory, store, job.submission_id, grader, job.job_id)
    return True


def run_worker(
    data: Path, root: Path, db_url: str | None, sandbox: bool, lease_s: float, parent: int | None = None
) -> None:
    """Claim, grade, save, finish; until SIGTERM (the job in hand is finished first), or until the
    supervisor ``parent`` is gone (checked between jobs, so an orphan never grades on unwatched)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    os.nice(WORKER_NICENESS)  # grading (and its kernels) yields the CPU to the web process: uploads stay quick
    settings = Settings(data=data, course_root=root, database_url=db_url)
    factory = session_factory(make_engine(settings.db_url))
    reader = session_factory(make_engine(settings.db_url, immediate=False))
    store = UploadStore(settings.uploads)
    course = load_course(root)
    grader = Grader(course, sandbox=sandbox)
    me = f"{PREFIX}{os.getpid()}/"
    pause = float(os.environ.get(PAUSE_ENV) or 0)
    lease = lease_s or course.limits.submission_timeout_s + 120
    parent = parent or os.getppid()
    try:
        while not stop.is_set() and os.getppid() == parent:  # an orphan stops: its supervisor is gone
            if not (queue.has_work(reader) and step(factory, store, grader, me, lease, pause)):
                stop.wait(IDLE_SLEEP_S)
    finally:
        grader.close()


class Supervisor:
    """Starts N worker processes and restarts any that dies (in a thread of the serve process)."""

    def __init__(self, settings: Settings, count: int, poll_s: float = 0.5) -> None:
        self.settings = settings
        self.count = count
        self.poll_s = poll_s
        self.factory = session_factory(make_engine(settings.db_url))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.restarts = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _spawn(self) -> subprocess.Popen[bytes]:
        s = self.settings
        cmd = [sys.executable, "-m", "grader.service.worker", "--data", str(s.data), "--root", str(s.course_root)]
        cmd += ["--lease", str(s.lease_seconds), "--parent", str(os.getpid())]
        if s.database_url:
            cmd += ["--db", s.database_url]
        if not s.sandbox:
            cmd.append("--no-sandbox")
        return subprocess.Popen(cmd)

    def start(self) -> None:
        queue.release_worker(self.factory, PREFIX)  # every embedded worker of an earlier run is dead
        self.procs = [self._spawn() for _ in range(self.count)]
        self._thread = threading.Thread(target=self._watch, name="course-supervisor", daemon=True)
        self._thread.start()

    def alive(self) -> int:
        """Worker processes running now (for the instructor's page and ``/metrics``)."""
        return sum(proc.poll() is None for proc in self.procs)

    def check(self) -> None:
        """Restart dead workers and put their jobs back."""
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                queue.release_worker(self.factory, f"{PREFIX}{proc.pid}/")
                self.procs[i] = self._spawn()
                self.restarts += 1
                print(f"course serve: worker {proc.pid} exited ({proc.returncode}); restarted", file=sys.stderr)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check()
            except Exception as exc:  # noqa: BLE001 - the watcher must outlive a busy database
                print(f"course serve: supervisor: {exc}", file=sys.stderr)

    def stop(self, timeout: float = 10) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m grader.service.worker")
    p.add_argument("--data", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--db")
    p.add_argument("--lease", type=float, default=0.0)
    p.add_argument("--no-sandbox", action="store_true")
    p.add_argument("--parent", type=int, help="the supervisor's pid: the worker stops when it is gone")
    args = p.parse_args(argv)
    run_worker(Path(args.data), Path(args.root), args.db, not args.no_sandbox, args.lease, args.parent)


if __name__ == "__main__":
    main()
