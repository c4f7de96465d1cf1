"""Alembic environment: run with the connection ``grader.service.db.migrate`` hands over."""

from __future__ import annotations

from alembic import context

from grader.service.models import Base

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - always called through grader.service.db.migrate
    raise RuntimeError("run migrations through grader.service.db.migrate (course serve does this)")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
