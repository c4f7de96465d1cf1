"""A durable grading queue in the database: the job row is written in the upload's transaction.

A worker claims the oldest job that is queued, or running under an expired lease, in one atomic
UPDATE (with ``SKIP LOCKED`` on PostgreSQL). The claim counts an attempt; a job claimed more than
``MAX_ATTEMPTS`` times (it keeps killing its worker) is given up with a clear message instead of
being retried for ever. Results are keyed by submission, so a job that runs twice yields one result.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from .models import Job, Submission, utcnow

MAX_ATTEMPTS = 3


class QueueFull(Exception):
    """Too many jobs are waiting; the upload is refused rather than queued for hours."""


@dataclass(frozen=True)
class Claimed:
    job_id: int
    submission_id: int
    attempts: int


def enqueue(session: Session, submission_id: int, max_queued: int | None = None) -> Job:
    """Add a job in the caller's transaction (commit it together with what it grades)."""
    if max_queued is not None:
        waiting = session.scalar(select(func.count()).select_from(Job).where(Job.state.in_(("queued", "running"))))
        if (waiting or 0) >= max_queued:
            raise QueueFull
    job = Job(submission_id=submission_id, state="queued")
    session.add(job)
    session.execute(update(Submission).where(Submission.id == submission_id).values(status="queued"))
    return job


def _claimable(now: datetime) -> ColumnElement[bool]:
    return or_(Job.state == "queued", (Job.state == "running") & (Job.lease_until < now))


def leased_to(worker: str, now: datetime, lease_s: float) -> dict[str, Any]:
    """The values a claim writes to a job row. The embedded queue and the distributed workers claim
    differently (the next job, or one named job) but must lease and count attempts the same way."""
    return {
        "state": "running",
        "worker": worker,
        "lease_until": now + timedelta(seconds=lease_s),
        "attempts": Job.attempts + 1,
        "updated_at": now,
    }


def mark_running(session: Session, submission_id: int) -> None:
    """Show the student that their claimed submission is being graded."""
    session.execute(update(Submission).where(Submission.id == submission_id).values(status="running"))


def has_work(reader: sessionmaker[Session]) -> bool:
    """Whether a job could be claimed: a read, so that idle workers polling never take the write lock."""
    with reader() as session:
        return session.scalar(select(Job.id).where(_claimable(utcnow())).limit(1)) is not None


def claim(factory: sessionmaker[Session], worker: str, lease_s: float) -> Claimed | None:
    """Take the next job with a lease, or None when there is nothing to do."""
    now = utcnow()
    claimable = _claimable(now)
    pick = select(Job.id).where(claimable).order_by(Job.id).limit(1).with_for_update(skip_locked=True)
    stmt = (
        update(Job)
        .where(Job.id == pick.scalar_subquery(), claimable)
        .values(**leased_to(worker, now, lease_s))
        .returning(Job.id, Job.submission_id, Job.attempts)
    )
    with factory.begin() as session:
        row = session.execute(stmt).first()
        if row is None:
            return None
        mark_running(session, row.submission_id)
    return Claimed(row.id, row.submission_id, row.attempts)


def finish(factory: sessionmaker[Session], job_id: int, state: str = "done") -> None:
    with factory.begin() as session:
        finish_in(session, job_id, state)


def finish_in(session: Session, job_id: int, state: str = "done") -> None:
    """End a job inside the caller's transaction, so a result and its job's end commit together."""
    session.execute(update(Job).where(Job.id == job_id).values(state=state, lease_until=None, updated_at=utcnow()))


def release_worker(factory: sessionmaker[Session], worker_prefix: str) -> int:
    """Put back the running jobs of dead workers (ids starting with ``worker_prefix``) at once,
    without waiting for their leases to run out. Returns how many were put back.

    Worker ids end with ``/`` (``embedded/1234/``), so the prefix of one worker names only that one.
    """
    with factory.begin() as session:
        jobs = session.scalars(
            select(Job).where(Job.state == "running", Job.worker.startswith(worker_prefix, autoescape=True))
        ).all()
        for job in jobs:
            job.state, job.lease_until, job.updated_at = "queued", None, utcnow()
            session.execute(update(Submission).where(Submission.id == job.submission_id).values(status="queued"))
        return len(jobs)


def pending(factory: sessionmaker[Session]) -> int:
    with factory() as session:
        return session.scalar(select(func.count()).select_from(Job).where(Job.state.in_(("queued", "running")))) or 0
