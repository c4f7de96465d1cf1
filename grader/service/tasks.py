"""The grading task: one function, no web code, idempotent, so any queue can run it.

The embedded workers (``worker.py``) call it; a Celery task can call the very same function.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ..grade import Grader, failed_result
from . import queue
from .models import Result, Submission, utcnow
from .store import UploadStore

GAVE_UP = "这份提交在评分时多次导致评分进程中止，已停止重试。请检查代码里是否有耗尽内存或进程的部分，修改后重新提交；如有疑问请联系助教。"
INTERNAL = "评分程序内部错误（{kind}），这不是你的问题；请联系助教。"


def grade_submission(
    factory: sessionmaker[Session], store: UploadStore, submission_id: int, grader: Grader, job_id: int | None = None
) -> dict[str, Any]:
    """Grade one stored submission and save its result (replacing an earlier one). Safe to repeat.

    With ``job_id``, that job ends as ``done`` in the result's own transaction: nobody ever sees a
    graded submission whose job still runs, and a worker killed in between leaves nothing half-done.
    """
    with factory() as session:
        sub = session.get(Submission, submission_id)
        if sub is None:
            raise LookupError(f"no submission {submission_id}")
        lesson, digest = sub.lesson, sub.sha256
    name = f"{lesson}.ipynb"
    try:
        result = grader.grade_bytes(store.read(digest), name, expect_lesson=lesson)
    except Exception as exc:  # noqa: BLE001 - a grader bug is reported, never lost
        result = failed_result(name, lesson, INTERNAL.format(kind=type(exc).__name__))
        result["course_faults"] = [f"submission {submission_id}: internal error {type(exc).__name__}: {exc}"]
    save_result(factory, submission_id, result, job_id)
    return result


def give_up(factory: sessionmaker[Session], submission_id: int, job_id: int | None = None) -> None:
    """Record that a submission cannot be graded because it keeps killing its worker (and end its
    job, if given, as ``failed``)."""
    with factory() as session:
        sub = session.get(Submission, submission_id)
        lesson = sub.lesson if sub else None
    save_result(factory, submission_id, failed_result(f"{lesson}.ipynb", lesson, GAVE_UP), job_id, "failed")


def save_result(
    factory: sessionmaker[Session],
    submission_id: int,
    result: dict[str, Any],
    job_id: int | None = None,
    job_state: str = "done",
) -> None:
    """Insert or replace the one result of a submission, and end ``job_id`` (if given) in the same
    transaction; the UNIQUE key settles a race between two runs."""
    data = json.dumps(result, ensure_ascii=False, sort_keys=True)
    status = "graded" if result.get("graded") else "failed"
    for _ in range(2):
        try:
            with factory.begin() as session:
                row = session.scalar(select(Result).where(Result.submission_id == submission_id))
                if row is None:
                    session.add(Result(submission_id=submission_id, data=data, total=result["total"]))
                else:
                    row.data, row.total, row.graded_at = data, result["total"], utcnow()
                sub = session.get(Submission, submission_id)
                if sub is not None:
                    sub.status = status
                if job_id is not None:
                    queue.finish_in(session, job_id, job_state)
            return
        except IntegrityError:
            continue  # another run inserted first; the second pass updates its row
    raise RuntimeError(f"could not save the result of submission {submission_id}")
