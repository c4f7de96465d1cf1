"""The distributed engine: the service's grading task on Celery with a Redis broker.

Celery (with Redis) is what people already run for this job; this module only configures it the
way Celery's own guidance asks for tasks that must not be lost: late acknowledgement
(``task_acks_late``), a task whose worker process died goes back to the queue
(``task_reject_on_worker_lost``) and one message at a time per worker (prefetch 1). The task body
is ``grader.service.tasks.grade_submission``, the function the embedded workers run; the job table
(``distributed.claim_job``) makes a message delivered twice grade once.

Two commands, the same on every host (see docs/service.md, "More machines")::

    course serve --engine celery --db URL --broker URL   # the web app and the dispatcher
    course worker --root R --db URL --broker URL         # one grading process (``start_worker``)

Test-only hooks, never set in production: ``COURSE_TEST_WORKER_PAUSE=<seconds>`` (wait after the
claim, before grading) and ``COURSE_TEST_POISON=<text>`` (a worker process that is handed an upload
containing the text kills itself, the way a submission that crashes its worker would).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import worker_process_shutdown
from kombu import Connection
from kombu.exceptions import KombuError
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from ..course import load_course, load_settings
from ..errors import CourseError
from . import distributed, queue
from .db import CONNECT_TIMEOUT_S, check_database, head_revision, make_engine, schema_revision, session_factory
from .settings import BROKER_ENV
from .tasks import give_up, grade_submission

TASK = "course.grade"
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
    prefork: bool = False  # kernels forked from a warm zygote (root mode only; docs/security.md)
    hashes: dict[str, str] = field(default_factory=dict)  # lesson contents at start: its queues


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
        identity = distributed.Identity(CONFIG.name, CONFIG.commit, CONFIG.hashes)
        _STATE = WorkerState(
            factory,
            distributed.DatabaseUploads(factory),
            distributed.StampedGrader(course, identity, CONFIG.sandbox, CONFIG.prefork),
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
        give_up(state.factory, submission_id, job_id)
        return "gave-up"
    with distributed.LeaseKeeper(state.factory, job_id, config.name, config.lease_s):
        _test_hooks(state, submission_id)
        grader = state.grader
        grader.course.releases = load_settings(grader.course.root)[1]  # answers released since start count
        grade_submission(state.factory, state.uploads, submission_id, grader, job_id)
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


@app.task(name=TASK, bind=True, autoretry_for=(SQLAlchemyError,), retry_backoff=True, max_retries=8)
def grade(self: Any, submission_id: int, job_id: int) -> str:
    """The Celery task: one job of the job table.

    A database error is retried (a new message, with backoff): a task that raised would otherwise be
    acknowledged with its job unclaimed, and the job would wait for the dispatcher's 15-minute resend.
    """
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


# --- checks and the worker command ----------------------------------------------------------------


def shown(url: str) -> str:
    """The broker URL without its password, for messages and logs."""
    try:
        return str(Connection(url).as_uri())
    except Exception:  # noqa: BLE001 - an unusable URL is reported by check_broker
        return "<broker URL>"


def check_broker(url: str, setting: str = "--broker") -> None:
    """Connect to the broker once, or raise a one-line CourseError naming ``setting``."""
    example = "e.g. redis://:SECRET@10.0.0.5:6379/0"
    if "://" not in url:  # the text is not echoed: it may hold a password
        raise CourseError(f"{setting}: not a broker URL (no scheme://); give {example}")
    try:
        with Connection(url, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=CONNECT_TIMEOUT_S)
    except KeyError:
        scheme = url.split("://")[0]
        raise CourseError(f"{setting}: {scheme!r} is not a broker Celery knows; give {example}") from None
    except ValueError as exc:  # e.g. a database number that is not one
        raise CourseError(f"{setting}: not a broker URL Celery can use ({exc}); give {example}") from None
    except (OSError, KombuError) as exc:
        raise CourseError(
            f"{setting}: cannot reach the broker {shown(url)} ({exc}); start it, or fix the URL"
        ) from None


def check_schema(engine: Engine, setting: str = "--db") -> None:
    """A worker grades only on a database migrated by a web host of the same schema (it never migrates)."""
    found, head = schema_revision(engine), head_revision()
    if found is None:
        raise CourseError(f"{setting}: the database has no tables yet; start `course serve --engine celery` first")
    if found != head:
        raise CourseError(
            f"{setting}: the database schema is at migration {found}, this checkout needs {head}; "
            "update this checkout (or the web host) so that both run the same version"
        )


def start_worker(
    root: Path,
    db_url: str,
    broker_url: str,
    sandbox: bool = True,
    lease_s: float = distributed.DEFAULT_LEASE_S,
    name: str | None = None,
    prefork: bool = False,
) -> None:
    """``course worker``: check the settings, state the commit and lesson contents, then consume the
    lessons' queues until SIGTERM (the job in hand is finished first) or SIGINT."""
    global CONFIG
    course = load_course(root)
    engine = check_database(db_url)
    try:
        check_schema(engine)
    finally:
        engine.dispose()  # the pool process opens its own (connections must not cross a fork)
    check_broker(broker_url)
    hashes = distributed.course_hashes(course)
    queues = distributed.course_queues(course, hashes)
    commit = distributed.course_commit(root)
    host = name or os.uname().nodename
    CONFIG = WorkerConfig(root, db_url, sandbox, lease_s, distributed.worker_name(host), commit, prefork, hashes)
    print(f"course worker: {CONFIG.name} grades with commit {commit}", file=sys.stderr)
    for slug, qname in queues.items():
        print(f"course worker:   {slug} -> {qname}", file=sys.stderr)
    app.conf.broker_url = broker_url
    argv = ["worker", "--pool=prefork", "--concurrency=1", "--loglevel=WARNING"]
    argv += ["--without-gossip", "--without-mingle", "-n", f"{host}.{os.getpid()}@%h", "-Q", ",".join(queues.values())]
    app.worker_main(argv)
