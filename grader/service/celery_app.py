"""The distributed engine: the service's grading task on Celery with a Redis broker.

Celery (with Redis) is what people already run for this job; this module only configures it the
way Celery's own guidance asks for tasks that must not be lost: late acknowledgement
(``task_acks_late``), a task whose worker process died goes back to the queue
(``task_reject_on_worker_lost``) and one message at a time per worker (prefetch 1). The task body
is ``grader.service.tasks.grade_submission``, the function the embedded workers run; the job table
(``distributed.claim_job``) makes a message delivered twice grade once.

Two commands, the same on every host (see docs/service-distributed.md)::

    python -m grader.service.celery_app worker   --root R --db URL --broker URL   # one grading process
    python -m grader.service.celery_app dispatch --root R --db URL --broker URL   # beside the web app

Test-only hooks, never set in production: ``COURSE_TEST_WORKER_PAUSE=<seconds>`` (wait after the
claim, before grading) and ``COURSE_TEST_POISON=<text>`` (a worker process that is handed an upload
containing the text kills itself, the way a submission that crashes its worker would).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import worker_process_shutdown
from sqlalchemy.orm import Session, sessionmaker

from ..course import load_course, load_settings
from . import distributed, queue
from .db import make_engine, migrate, session_factory
from .tasks import give_up, grade_submission

TASK = "course.grade"
BROKER_ENV = "COURSE_BROKER_URL"
DATABASE_ENV = "COURSE_DATABASE_URL"
PAUSE_ENV = "COURSE_TEST_WORKER_PAUSE"
POISON_ENV = "COURSE_TEST_POISON"
VISIBILITY_S = 3600  # Redis gives an unacknowledged message to another worker after this long


def make_app(broker_url: str | None = None) -> Celery:
    """The Celery app; the broker comes from the argument or ``$COURSE_BROKER_URL``."""
    app = Celery("course", broker=broker_url or os.environ.get(BROKER_ENV) or "redis://127.0.0.1:6379/0")
    app.conf.update(
        task_acks_late=True,  # acknowledged after the task ran: a worker killed mid-task loses nothing
        task_reject_on_worker_lost=True,  # ...and its message is put back at once, not dropped
        worker_prefetch_multiplier=1,  # a worker holds one message; the others stay for idle workers
        task_ignore_result=True,  # results live in the service's database, keyed by submission
        task_serializer="json",
        accept_content=["json"],
        broker_transport_options={"visibility_timeout": VISIBILITY_S},
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,  # a worker waits out a broker restart
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        task_default_queue="grade.default",
    )
    return app


app = make_app()


@dataclass
class WorkerConfig:
    """What a worker process needs; set in the main process before the pool forks."""

    root: Path
    db_url: str
    sandbox: bool = True
    lease_s: float = distributed.DEFAULT_LEASE_S
    name: str = ""
    commit: str = distributed.COMMIT_UNKNOWN


@dataclass
class WorkerState:
    """Made lazily in the pool process (database connections and kernels must not cross a fork)."""

    factory: sessionmaker[Session]
    uploads: distributed.DatabaseUploads
    grader: distributed.StampedGrader


CONFIG: WorkerConfig | None = None
_STATE: WorkerState | None = None


def _state() -> WorkerState:
    global _STATE
    if _STATE is None:
        if CONFIG is None:
            raise RuntimeError("the grading task runs only in `course worker`")
        factory = session_factory(make_engine(CONFIG.db_url))
        course = load_course(CONFIG.root)
        identity = distributed.Identity(CONFIG.name, CONFIG.commit)
        _STATE = WorkerState(
            factory, distributed.DatabaseUploads(factory), distributed.StampedGrader(course, identity, CONFIG.sandbox)
        )
    return _STATE


@worker_process_shutdown.connect
def _close(**_: Any) -> None:
    if _STATE is not None:
        _STATE.grader.close()


def run_job(state: WorkerState, config: WorkerConfig, submission_id: int, job_id: int) -> str:
    """Claim a job, grade its submission with the shared task function, and finish it.

    Returns what happened: ``graded``, ``gave-up``, ``finished`` (already done) or ``held`` (another
    worker holds a live lease; if that worker died, the dispatcher sends the job again once the lease
    has run out).
    """
    claim = distributed.claim_job(state.factory, job_id, config.name, config.lease_s)
    if not claim.claimed:
        return "finished" if claim.finished else "held"
    if claim.attempts > queue.MAX_ATTEMPTS:  # it killed its worker every time
        give_up(state.factory, submission_id)
        queue.finish(state.factory, job_id, "failed")
        return "gave-up"
    with distributed.LeaseKeeper(state.factory, job_id, config.name, config.lease_s):
        _test_hooks(state, submission_id)
        grader = state.grader
        grader.course.releases = load_settings(grader.course.root)[1]  # answers released since start count
        grade_submission(state.factory, state.uploads, submission_id, grader)
    queue.finish(state.factory, job_id)
    return "graded"


def _test_hooks(state: WorkerState, submission_id: int) -> None:
    pause = float(os.environ.get(PAUSE_ENV) or 0)
    if pause:
        time.sleep(pause)
    poison = os.environ.get(POISON_ENV)
    if poison:
        with state.factory() as session:
            from .models import Submission

            sub = session.get(Submission, submission_id)
            digest = sub.sha256 if sub else ""
        if digest and poison.encode() in state.uploads.read(digest):
            os.kill(os.getpid(), signal.SIGKILL)


@app.task(name=TASK, bind=True)
def grade(self: Any, submission_id: int, job_id: int) -> str:
    """The Celery task: one job of the job table."""
    if CONFIG is None:
        raise RuntimeError("the grading task runs only in `course worker`")
    return run_job(_state(), CONFIG, submission_id, job_id)


def sender(celery: Celery) -> distributed.Send:
    """Publish one job to its lesson's queue (the dispatcher's ``send``)."""

    def send(job: distributed.Outgoing, queue_name: str) -> None:
        celery.send_task(
            TASK,
            args=[job.submission_id, job.job_id],
            queue=queue_name,
            retry=True,
            retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5},
        )

    return send


def worker_count(celery: Celery, timeout: float = 1.0) -> int:
    """Workers answering a ping now (each ``course worker`` is one)."""
    replies = celery.control.ping(timeout=timeout) or []
    return len(replies)


# --- commands -------------------------------------------------------------------------------------


def start_worker(
    root: Path,
    db_url: str,
    broker_url: str,
    sandbox: bool = True,
    lease_s: float = distributed.DEFAULT_LEASE_S,
    name: str | None = None,
) -> None:
    """``course worker``: state the commit and lesson contents, then consume their queues for ever."""
    global CONFIG
    course = load_course(root)
    queues = distributed.course_queues(course)
    commit = distributed.course_commit(root)
    host = name or os.uname().nodename
    CONFIG = WorkerConfig(root, db_url, sandbox, lease_s, distributed.worker_name(host), commit)
    print(f"course worker: {CONFIG.name} grades with commit {commit}", file=sys.stderr)
    for slug, qname in queues.items():
        print(f"course worker:   {slug} -> {qname}", file=sys.stderr)
    app.conf.broker_url = broker_url
    argv = ["worker", "--pool=prefork", "--concurrency=1", "--loglevel=WARNING"]
    argv += ["--without-gossip", "--without-mingle", "-n", f"{host}.{os.getpid()}@%h", "-Q", ",".join(queues.values())]
    app.worker_main(argv)


def dispatch(root: Path, db_url: str, broker_url: str, every_s: float = 1.0, resend_s: float | None = None) -> None:
    """Run the dispatcher until SIGTERM or SIGINT (``course serve`` runs it in a thread instead)."""
    engine = make_engine(db_url)
    migrate(engine)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    course = load_course(root)
    celery = make_app(broker_url)
    dispatcher = distributed.Dispatcher(
        session_factory(engine), course, sender(celery), resend_s or distributed.DEFAULT_RESEND_S
    )
    print(f"course dispatch: sending jobs to {broker_url}", file=sys.stderr)
    dispatcher.run(stop, every_s, log=lambda line: print(f"course dispatch: {line}", file=sys.stderr))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m grader.service.celery_app")
    p.add_argument("command", choices=("worker", "dispatch"))
    p.add_argument("--root", default=".", help="the course checkout")
    p.add_argument("--db", default=os.environ.get(DATABASE_ENV), help=f"database URL (default ${DATABASE_ENV})")
    p.add_argument("--broker", default=os.environ.get(BROKER_ENV), help=f"broker URL (default ${BROKER_ENV})")
    p.add_argument("--lease", type=float, default=distributed.DEFAULT_LEASE_S, help="seconds; renewed while grading")
    p.add_argument("--resend", type=float, default=None, help="dispatch: resend an unclaimed message after S s")
    p.add_argument("--name", help="worker: the host name to report (default: this machine's)")
    p.add_argument("--no-sandbox", action="store_true", help="worker: run student code without bubblewrap")
    args = p.parse_args(argv)
    if not args.db or not args.broker:
        p.error(f"--db and --broker are required (or ${DATABASE_ENV} and ${BROKER_ENV})")
    root = Path(args.root).resolve()
    if args.command == "worker":
        start_worker(root, args.db, args.broker, not args.no_sandbox, args.lease, args.name)
    else:
        dispatch(root, args.db, args.broker, resend_s=args.resend)


if __name__ == "__main__":
    main()
