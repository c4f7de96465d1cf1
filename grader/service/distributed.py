"""Grading on more machines: what the distributed engine adds to the embedded queue, without Celery.

The job table stays the source of truth (``queue.py``): an upload's submission, its bytes and its job
are committed in one transaction, exactly as in the embedded default. The broker only carries
"grade job J of submission S" messages, so a lost message can always be sent again from the table.

- **Uploads through the database** (``models.UploadBlob``): every grading host already needs the database,
  so storing the notebook's bytes there (they are at most ``limits.upload_bytes``, 2 MB) adds no
  service to run and no second place that must stay consistent with the rows, and the upload and its
  row commit or fail together.
- **Routing by lesson content**: a lesson's grading depends on its source, ``checks.py`` and
  ``rubric.yml``. ``lesson_hash`` digests them, and each message goes to the queue named after the
  lesson and that digest (``queue_name``). A worker listens only on the queues of its own checkout,
  so a worker at a commit whose checks or rubric of a lesson differ never receives that lesson's
  jobs; they wait for a worker that matches.
- **Claims with a renewed lease**: a task claims its job (counting an attempt), renews the lease while
  it grades, and gives a submission up after ``queue.MAX_ATTEMPTS`` claims (it keeps killing its
  worker). A job whose worker vanished is sent again by the dispatcher once its lease has run out.
- **The dispatcher** (``Dispatcher``) runs beside the web app: it sends the jobs not yet sent, and
  sends again those whose message or worker was lost.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker

from ..course import Course
from ..grade import Grader
from . import queue
from .models import Job, Submission, UploadBlob, utcnow
from .store import UploadStore

SENT = "sent/"  # Job.worker of a job handed to the broker and not yet claimed
WORKER_PREFIX = "celery/"
COMMIT_UNKNOWN = "unknown"
DEFAULT_LEASE_S = 30.0  # renewed every third of it while grading, so it only bounds the recovery time
DEFAULT_RESEND_S = 900.0  # a message not claimed after this long is assumed lost by the broker


def put_blob(session: Session, data: bytes) -> str:
    """Store an upload's bytes in the caller's transaction (once per content); return the sha256.

    ``INSERT ... ON CONFLICT DO NOTHING``: at a deadline many students upload the same untouched
    notebook at the same moment, and a check-then-insert would fail one of two such uploads.
    """
    digest = hashlib.sha256(data).hexdigest()
    values = {"sha256": digest, "data": data, "size": len(data), "created_at": utcnow()}
    dialect = session.get_bind().dialect.name
    if dialect in ("postgresql", "sqlite"):
        insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
        session.execute(insert(UploadBlob).values(**values).on_conflict_do_nothing(index_elements=["sha256"]))
    elif session.scalar(select(UploadBlob.sha256).where(UploadBlob.sha256 == digest)) is None:
        session.add(UploadBlob(**values))
        session.flush()
    return digest


class DatabaseUploads(UploadStore):
    """The upload store of the distributed engine: the bytes live in the database, not in a folder."""

    def __init__(self, factory: sessionmaker[Session]) -> None:  # no super(): there is no folder
        self.factory = factory

    def put(self, data: bytes) -> str:
        with self.factory.begin() as session:
            return put_blob(session, data)

    def put_in(self, session: Session, data: bytes) -> str:
        return put_blob(session, data)

    def read(self, sha256: str) -> bytes:
        with self.factory() as session:
            blob = session.get(UploadBlob, sha256)
            if blob is None:
                raise FileNotFoundError(f"upload {sha256} is not in the database")
            return blob.data


def submit(factory: sessionmaker[Session], user_id: int, lesson: str, data: bytes, late_days: int = 0) -> int:
    """Store an upload, its submission row and its job in one transaction; return the submission id.

    This is what the upload route does in distributed mode (the bytes go to ``upload_blobs``).
    """
    with factory.begin() as session:
        digest = put_blob(session, data)
        sub = Submission(user_id=user_id, lesson=lesson, sha256=digest, size=len(data), late_days=late_days)
        session.add(sub)
        session.flush()
        queue.enqueue(session, sub.id)
        return sub.id


# --- what a worker grades with --------------------------------------------------------------------


def lesson_hash(course: Course, slug: str) -> str:
    """sha256 over the files that decide a lesson's grade: its source, checks.py and rubric.yml."""
    digest = hashlib.sha256()
    folder = course.solutions_dir(slug)
    for path in (course.lesson(slug).path, folder / "checks.py", folder / "rubric.yml"):
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
        digest.update(b"\0")
    return digest.hexdigest()


def queue_name(slug: str, content_hash: str) -> str:
    """The broker queue of one lesson at one content: ``grade.lesson04.<16 hex digits>``."""
    return f"grade.{slug}.{content_hash[:16]}"


def course_hashes(course: Course) -> dict[str, str]:
    """slug -> ``lesson_hash`` for every lesson of a checkout."""
    return {slug: lesson_hash(course, slug) for slug in sorted(course.lessons)}


def course_queues(course: Course, hashes: dict[str, str] | None = None) -> dict[str, str]:
    """slug -> queue name for every lesson of a checkout (from ``hashes`` when given)."""
    return {slug: queue_name(slug, digest) for slug, digest in (hashes or course_hashes(course)).items()}


def course_commit(root: Path) -> str:
    """``git rev-parse HEAD`` of the checkout, ``-dirty`` appended when tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return COMMIT_UNKNOWN
    return head + ("-dirty" if dirty else "")


@dataclass(frozen=True)
class Identity:
    """Who graded: the worker's name, its checkout's commit and the lesson content it graded with.

    ``hashes`` are the lesson hashes taken when the worker started, the ones its queues are named
    after: a file edited under a running worker must not make its results claim content it was
    not routed by (restart workers after updating their checkout).
    """

    worker: str
    commit: str
    hashes: dict[str, str] = field(default_factory=dict)

    def stamp(self, course: Course, slug: str) -> dict[str, str]:
        return {
            "engine": "celery",
            "worker": self.worker,
            "commit": self.commit,
            "lesson_hash": self.hashes.get(slug) or lesson_hash(course, slug),
        }


class StampedGrader(Grader):
    """A Grader whose results say which worker, commit and lesson content graded them."""

    def __init__(self, course: Course, identity: Identity, sandbox: bool = True, prefork: bool = False) -> None:
        super().__init__(course, sandbox=sandbox, prefork=prefork)
        self.identity = identity

    def grade_bytes(self, data: bytes, name: str, expect_lesson: str | None = None) -> dict[str, Any]:
        result = super().grade_bytes(data, name, expect_lesson)
        slug = result.get("lesson") or expect_lesson
        if slug in self.course.lessons:
            result["graded_by"] = self.identity.stamp(self.course, slug)
        return result


# --- claiming a job from a task -------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """The outcome of trying to claim a job: ``attempts`` when claimed, else why not."""

    claimed: bool
    attempts: int = 0
    finished: bool = False  # done or failed: nothing left to do (else: another worker holds it)


def claim_job(factory: sessionmaker[Session], job_id: int, me: str, lease_s: float) -> Claim:
    """Claim one given job for ``me`` if it is waiting, or running under a lease that ran out.

    One conditional UPDATE, so two deliveries of the same message never both claim it. A job held by
    ``me`` itself is claimable too: a worker grades one job at a time, so if it is handed a job it
    holds, the process that held it has died (its message came back through
    ``task_reject_on_worker_lost``) and waiting for the lease would only delay the retry.
    """
    now = utcnow()
    held_by_dead = or_(Job.lease_until < now, Job.worker == me)
    claimable = or_(Job.state == "queued", and_(Job.state == "running", held_by_dead))
    stmt = (
        update(Job)
        .where(Job.id == job_id, claimable)
        .values(**queue.leased_to(me, now, lease_s))
        .returning(Job.submission_id, Job.attempts)
    )
    with factory.begin() as session:
        row = session.execute(stmt).first()
        if row is not None:
            queue.mark_running(session, row.submission_id)
            return Claim(True, attempts=row.attempts)
        job = session.get(Job, job_id)
        return Claim(False, finished=job is None or job.state in ("done", "failed"))


def renew(factory: sessionmaker[Session], job_id: int, me: str, lease_s: float) -> bool:
    """Extend ``me``'s lease of a running job; False when the job is no longer ``me``'s."""
    with factory.begin() as session:
        done = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.state == "running", Job.worker == me)
            .values(lease_until=utcnow() + timedelta(seconds=lease_s))
        )
        return bool(getattr(done, "rowcount", 0))


class LeaseKeeper:
    """Renews a job's lease every third of ``lease_s`` in a thread while the job is graded.

    A short lease is then safe for a long grading run, and a worker that dies stops renewing, so
    its job is free again within one lease.
    """

    def __init__(self, factory: sessionmaker[Session], job_id: int, me: str, lease_s: float) -> None:
        self._stop = threading.Event()
        self._args = (factory, job_id, me, lease_s)
        self._thread = threading.Thread(target=self._run, name=f"lease-{job_id}", daemon=True)

    def _run(self) -> None:
        factory, job_id, me, lease_s = self._args
        while not self._stop.wait(lease_s / 3):
            try:
                renew(factory, job_id, me, lease_s)
            except Exception:  # noqa: BLE001 - a missed renewal is retried; the lease has slack
                continue

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


# --- the dispatcher -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outgoing:
    job_id: int
    submission_id: int
    lesson: str


def due_jobs(factory: sessionmaker[Session], resend_s: float, limit: int = 500) -> list[Outgoing]:
    """Jobs to send: never sent; sent but unclaimed for ``resend_s``; or running on an expired lease."""
    now = utcnow()
    never_sent = and_(Job.state == "queued", or_(Job.worker.is_(None), ~Job.worker.startswith(SENT)))
    lost_message = and_(Job.state == "queued", Job.worker.startswith(SENT), Job.lease_until < now)
    lost_worker = and_(Job.state == "running", Job.lease_until < now)
    stmt = (
        select(Job.id, Job.submission_id, Submission.lesson)
        .join(Submission, Submission.id == Job.submission_id)
        .where(or_(never_sent, lost_message, lost_worker))
        .order_by(Job.id)
        .limit(limit)
    )
    with factory() as session:
        return [Outgoing(r.id, r.submission_id, r.lesson) for r in session.execute(stmt)]


def mark_sent(factory: sessionmaker[Session], job_ids: Iterable[int], resend_s: float) -> None:
    """Note that these jobs' messages are with the broker.

    A job taken back from a worker whose lease ran out becomes queued again, so that it is sent once
    and not on every tick until a worker is free; a job claimed meanwhile is left alone.

    Rows are locked in the order a claim locks them, the job first and then its submission. The
    other order deadlocked with a worker claiming the job just sent: PostgreSQL then aborted one of
    the two, and when it was the claim, the message was spent and the job waited for the 15-minute
    resend (the killed-worker test timed out this way).
    """
    now = utcnow()
    ids = sorted(job_ids)
    waiting = or_(Job.state == "queued", and_(Job.state == "running", Job.lease_until < now))
    with factory.begin() as session:
        rows = session.execute(
            select(Job.id, Job.state, Job.submission_id)
            .where(Job.id.in_(ids), waiting)
            .order_by(Job.id)
            .with_for_update()
        ).all()
        if not rows:
            return
        session.execute(
            update(Job)
            .where(Job.id.in_([row.id for row in rows]))
            .values(state="queued", worker=SENT, lease_until=now + timedelta(seconds=resend_s), updated_at=now)
        )
        taken_back = [row.submission_id for row in rows if row.state == "running"]
        if taken_back:
            session.execute(update(Submission).where(Submission.id.in_(taken_back)).values(status="queued"))


Send = Callable[[Outgoing, str], None]  # (job, queue name) -> published, or raises


class Dispatcher:
    """Sends due jobs to the broker: the outbox of the job table.

    A job is sent before it is marked sent, so a crash in between sends it twice (harmless: the
    claim lets one run through) and never loses it. A broker that is down leaves jobs unmarked; they
    go out on the next tick that reaches it.
    """

    def __init__(
        self, factory: sessionmaker[Session], course: Course, send: Send, resend_s: float = DEFAULT_RESEND_S
    ) -> None:
        self.factory = factory
        self.course = course
        self.send = send
        self.resend_s = resend_s
        self._queues: dict[str, str] = {}

    def queue_for(self, slug: str) -> str:
        if slug not in self._queues:
            self._queues[slug] = queue_name(slug, lesson_hash(self.course, slug))
        return self._queues[slug]

    def refresh(self) -> None:
        """Forget the content hashes (after the checkout was updated)."""
        self._queues.clear()

    def tick(self) -> int:
        """Send what is due; returns how many messages went out."""
        sent: list[int] = []
        try:
            for job in due_jobs(self.factory, self.resend_s):
                if job.lesson not in self.course.lessons:
                    queue.finish(self.factory, job.job_id, "failed")  # a lesson removed from the course
                    continue
                self.send(job, self.queue_for(job.lesson))
                sent.append(job.job_id)
        finally:
            if sent:
                mark_sent(self.factory, sent, self.resend_s)
        return len(sent)

    def run(self, stop: threading.Event, every_s: float = 1.0, log: Callable[[str], None] | None = None) -> None:
        """Tick until ``stop`` is set; a failed tick (broker or database away) is retried."""
        while not stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - the dispatcher must outlive a broker restart
                if log is not None:
                    log(f"dispatcher: {type(exc).__name__}: {exc}")
            stop.wait(every_s)


def worker_name(host: str | None = None) -> str:
    """``celery/<host>/<pid>/``: the Job.worker of a claim; ends with ``/`` like the embedded ids."""
    return f"{WORKER_PREFIX}{host or os.uname().nodename}/{os.getpid()}/"
