"""The service's tables. The schema is created and changed only by the Alembic migrations.

Times are naive UTC (``utcnow``), the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Boolean, DateTime, Float, ForeignKey, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

ROLES = ("student", "ta", "instructor")
STAFF = ("ta", "instructor")


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)  # the student id for students
    name: Mapped[str] = mapped_column(String(200), default="")
    role: Mapped[str] = mapped_column(String(16))
    password_hash: Mapped[str | None] = mapped_column(String(200), nullable=True)
    invite_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)  # sha256 of the one-time code
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Session(Base):
    __tablename__ = "sessions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    csrf: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(DateTime)


class LoginFailure(Base):
    """One failed login, counted per user name and per client address within a window."""

    __tablename__ = "login_failures"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(200), index=True)  # "user:<name>" or "ip:<address>"
    at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)


class Submission(Base):
    __tablename__ = "submissions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    lesson: Mapped[str] = mapped_column(String(32), index=True)
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default="queued")  # queued | running | graded | failed
    late_days: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)


class UploadBlob(Base):
    """An upload's bytes, keyed by their sha256 (the ``Submission.sha256`` that names them).

    Used by the distributed engine: every grading host reaches the database, so the bytes travel
    with the rows and commit with them (see ``distributed.put_blob``). The embedded engine keeps
    its uploads as files (``store.UploadStore``) and leaves this table empty.
    """

    __tablename__ = "upload_blobs"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Job(Base):
    """A durable grading job. A worker claims it with a lease; an expired lease puts it back."""

    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"), index=True)
    state: Mapped[str] = mapped_column(String(16), default="queued", index=True)  # queued|running|done|failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(100), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Result(Base):
    """The grader's result of a submission. One per submission: a job run twice yields one result."""

    __tablename__ = "results"
    __table_args__ = (UniqueConstraint("submission_id", name="uq_results_submission"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"))
    data: Mapped[str] = mapped_column(Text)  # the result JSON (docs/result-schema.md)
    total: Mapped[float] = mapped_column(Float)  # as graded, before overrides and late penalty
    graded_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Override(Base):
    """An instructor's change to one item or veto of a submission, with who, when, from, to and why."""

    __tablename__ = "overrides"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"), index=True)
    actor_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    target: Mapped[str] = mapped_column(String(64))  # code | q1 | q2 | q3 | veto:<id>
    from_value: Mapped[str] = mapped_column(String(64))
    to_value: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class RegradeRequest(Base):
    __tablename__ = "regrade_requests"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"), index=True)
    item: Mapped[str] = mapped_column(String(16))
    comment: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16), default="open")  # open | accepted | rejected
    response: Mapped[str] = mapped_column(Text, default="")
    resolved_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class AuditEntry(Base):
    """Staff actions other than overrides: regrades, releases, roster changes."""

    __tablename__ = "audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    action: Mapped[str] = mapped_column(String(64))
    detail: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class ScheduledRelease(Base):
    """A lesson whose answers are released automatically at ``at`` (by the serve process)."""

    __tablename__ = "scheduled_releases"
    lesson: Mapped[str] = mapped_column(String(32), primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime)
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
