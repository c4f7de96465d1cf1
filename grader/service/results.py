"""What people see of a stored result: overrides and the late penalty applied, and the gradebook.

The stored result is the grader's, untouched; overrides (audited rows) and the late policy are
applied on reading, with ``grader.overrides.apply_override``, the code ``course grade --overrides``
uses. The gradebook CSV is ``grader.report.gradebook_csv``: the columns of ``course grade --csv``.
"""

from __future__ import annotations

import copy
import json
import math
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..course import Course
from ..overrides import Override as OverrideSpec
from ..overrides import apply_override
from .models import Override, Result, Submission, User

ITEMS = ("code", "q1", "q2", "q3")


def late_days(course: Course, slug: str, at: datetime) -> int:
    """Started days after the lesson's deadline (0 when on time or without a deadline); ``at`` naive UTC."""
    deadline = course.service.deadlines.get(slug)
    if deadline is None:
        return 0
    over = at - deadline.astimezone(UTC).replace(tzinfo=None)
    return max(0, math.ceil(over.total_seconds() / 86400))


def effective(course: Course, sub: Submission, raw: dict[str, Any], overrides: list[Override]) -> dict[str, Any]:
    """The result with every override applied in order, then the late penalty."""
    result = copy.deepcopy(raw)
    if not result.get("graded"):
        return result
    for row in overrides:
        if row.target.startswith("veto:"):
            spec = OverrideSpec(str(sub.id), {}, (row.target[5:],), row.reason, 0)
        else:
            spec = OverrideSpec(str(sub.id), {row.target: float(row.to_value)}, (), row.reason, 0)
        apply_override(result, spec, course.pass_mark)
    penalty_rate = course.service.late_penalty_per_day if course.service.late_policy == "penalty" else 0.0
    if sub.late_days and penalty_rate:
        penalty = min(result["total"], sub.late_days * penalty_rate)
        result["total"] = round(result["total"] - penalty, 2)
        result["late_penalty"] = penalty
        result["errors"] = [*result.get("errors", []), f"迟交 {sub.late_days} 天，按课程规定扣 {penalty:g} 分。"]
        result["passed"] = result["total"] >= course.pass_mark and not result["vetoes"]
    return result


def load(session: Session, course: Course, sub: Submission) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(raw, effective) result of a submission, or (None, None) before it is graded."""
    row = session.scalar(select(Result).where(Result.submission_id == sub.id))
    if row is None:
        return None, None
    raw = json.loads(row.data)
    return raw, effective(course, sub, raw, overrides_of(session, sub.id))


def overrides_of(session: Session, submission_id: int) -> list[Override]:
    return list(session.scalars(select(Override).where(Override.submission_id == submission_id).order_by(Override.id)))


def current_value(result: dict[str, Any], target: str) -> str:
    """What an override target is now: an item's points, or whether a veto is in force."""
    if target.startswith("veto:"):
        return "vetoed" if any(v["id"] == target[5:] for v in result["vetoes"]) else "lifted"
    item = next(i for i in result["items"] if i["id"] == target)
    return f"{item['points']:g}"


def gradebook(
    session: Session, course: Course, slug: str
) -> list[tuple[User, Submission | None, dict[str, Any] | None]]:
    """One row per student: the best (or latest, by ``course.gradebook``) graded attempt."""
    students = session.scalars(select(User).where(User.role == "student").order_by(User.username)).all()
    subs = session.scalars(
        select(Submission).where(Submission.lesson == slug, Submission.status == "graded").order_by(Submission.id)
    ).all()
    by_user: dict[int, list[Submission]] = {}
    for s in subs:
        by_user.setdefault(s.user_id, []).append(s)
    rows: list[tuple[User, Submission | None, dict[str, Any] | None]] = []
    for user in students:
        chosen: tuple[Submission, dict[str, Any]] | None = None
        for s in by_user.get(user.id, []):
            _, eff = load(session, course, s)
            if eff is None:
                continue
            if chosen is None or course.service.gradebook == "latest" or eff["total"] >= chosen[1]["total"]:
                chosen = (s, eff)
        rows.append((user, chosen[0], chosen[1]) if chosen else (user, None, None))
    return rows


def gradebook_results(rows: list[tuple[User, Submission | None, dict[str, Any] | None]]) -> list[dict[str, Any]]:
    """Rows as results for ``grader.report.gradebook_csv``, each naming its student and attempt."""
    out = []
    for user, sub, result in rows:
        if sub is None or result is None:
            continue
        out.append({**result, "student": user.username, "name": user.name, "file": f"submission-{sub.id}", "flags": []})
    return out
