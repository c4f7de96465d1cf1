"""Routes for TAs and instructors: gradebook and CSV, a submission's full result, overrides, regrades,
the review queue; and, for instructors only, answer release and the roster.

A student (or anyone not staff) gets 404 from every route here, as if it did not exist.
"""

from __future__ import annotations

import tempfile
from datetime import UTC
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import UploadFile

from ..course import Course
from ..errors import CourseError
from ..lesson import CODE_POINTS, QUESTION_POINTS
from ..release import set_release
from ..report import gradebook_csv
from ..roster import load_roster
from . import accounts, metrics, queue, results
from .auth import end_all_sessions
from .deps import DB, DBW, PostedForm, check_csrf, require_staff, service
from .models import ROLES, AuditEntry, Job, Override, RegradeRequest, ScheduledRelease, Submission, User, utcnow
from .student import ITEM_NAMES, STATUS_TEXT, own_submission

router = APIRouter(prefix="/staff")


@router.get("")
def dashboard(request: Request, session: DB) -> Response:
    svc = service(request)
    viewer = require_staff(request, session)
    lessons = sorted(svc.course.lessons.values(), key=lambda lesson: lesson.number)
    schedules = {s.lesson: s.at for s in session.scalars(select(ScheduledRelease))}
    open_requests = len(session.scalars(select(RegradeRequest.id).where(RegradeRequest.state == "open")).all())
    load = metrics.snapshot(svc.reader, svc.workers()).rows()  # queue depth, workers, latency
    return svc.render(
        request, "staff.html", lessons=lessons, schedules=schedules, open_requests=open_requests,
        instructor=viewer.is_instructor, load=load,
    )  # fmt: skip


def _lesson(course: Course, slug: str) -> str:
    if slug not in course.lessons:
        raise HTTPException(404)
    return slug


@router.get("/lessons/{slug}/gradebook")
def gradebook_page(request: Request, slug: str, session: DB) -> Response:
    svc = service(request)
    require_staff(request, session)
    rows = results.gradebook(session, svc.course, _lesson(svc.course, slug))
    return svc.render(request, "gradebook.html", slug=slug, rows=rows, policy=svc.course.service.gradebook)


@router.get("/lessons/{slug}/gradebook.csv")
def gradebook_export(request: Request, slug: str, session: DB) -> Response:
    """The columns of ``course grade --csv``, UTF-8 with a BOM for spreadsheets."""
    svc = service(request)
    require_staff(request, session)
    rows = results.gradebook(session, svc.course, _lesson(svc.course, slug))
    text = "\ufeff" + gradebook_csv(results.gradebook_results(rows))
    return Response(
        text.encode("utf-8"),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{slug}-gradebook.csv"'},
    )


@router.post("/submissions/{submission_id}/override")
def override(request: Request, submission_id: int, session: DBW, form: PostedForm) -> Response:
    """Change an item's points or lift a veto, with a reason; audited with who, when, from and to."""
    svc = service(request)
    viewer = require_staff(request, session)
    sub = own_submission(session, viewer, submission_id)
    check_csrf(request, viewer, form)
    target, reason = str(form.get("target") or ""), str(form.get("reason") or "").strip()
    _raw, eff = results.load(session, svc.course, sub)
    if eff is None or not eff.get("graded"):
        raise HTTPException(400, "这份提交还没有评分结果，无法调整。")
    if not reason or len(reason) > 2000:
        raise HTTPException(400, "调整必须写明理由（最多 2000 字）。")
    if target.startswith("veto:"):
        if not any(v["id"] == target[5:] for v in eff["vetoes"]):
            raise HTTPException(400, f"这份提交当前没有一票否决项 {target[5:]}。")
        to = "lifted"
    elif target in ITEM_NAMES:
        limit = CODE_POINTS if target == "code" else QUESTION_POINTS
        try:
            points = float(str(form.get("points") or ""))
        except ValueError:
            points = -1.0
        if not 0 <= points <= limit:
            raise HTTPException(400, f"{ITEM_NAMES[target]} 的分数必须在 0 到 {limit} 之间。")
        to = f"{points:g}"
    else:
        raise HTTPException(400, "未知的调整项。")
    session.add(
        Override(
            submission_id=sub.id,
            actor_id=viewer.user.id,
            target=target,
            from_value=results.current_value(eff, target),
            to_value=to,
            reason=reason,
        )
    )
    session.commit()
    return RedirectResponse(f"/submissions/{sub.id}", status_code=303)


def _regrade(session: Session, sub: Submission, max_queued: int) -> bool:
    """Queue a regrade unless one is already waiting. The result is replaced; overrides stay."""
    waiting = session.scalar(select(Job.id).where(Job.submission_id == sub.id, Job.state.in_(("queued", "running"))))
    if waiting is not None:
        return False
    queue.enqueue(session, sub.id, max_queued)
    return True


@router.post("/submissions/{submission_id}/regrade")
def regrade_one(request: Request, submission_id: int, session: DBW, form: PostedForm) -> Response:
    svc = service(request)
    viewer = require_staff(request, session)
    sub = own_submission(session, viewer, submission_id)
    check_csrf(request, viewer, form)
    try:
        _regrade(session, sub, svc.settings.max_queued)
    except queue.QueueFull:
        raise HTTPException(503, "评分队列已满，请稍后再试。") from None
    session.add(AuditEntry(actor_id=viewer.user.id, action="regrade", detail=f"submission {sub.id}"))
    session.commit()
    return RedirectResponse(f"/submissions/{sub.id}", status_code=303)


@router.post("/lessons/{slug}/regrade")
def regrade_lesson(request: Request, slug: str, session: DBW, form: PostedForm) -> Response:
    """Regrade every submission of a lesson, e.g. after a rubric or checks.py fix."""
    svc = service(request)
    viewer = require_staff(request, session, instructor=True)
    _lesson(svc.course, slug)
    check_csrf(request, viewer, form)
    count = 0
    for sub in session.scalars(select(Submission).where(Submission.lesson == slug)).all():
        count += _regrade(session, sub, svc.settings.max_queued + 100_000)  # a deliberate bulk job is not refused
    session.add(AuditEntry(actor_id=viewer.user.id, action="regrade-lesson", detail=f"{slug}: {count} queued"))
    session.commit()
    return RedirectResponse("/staff", status_code=303)


@router.get("/review")
def review(request: Request, session: DB) -> Response:
    """Open regrade requests, and graded submissions with a veto flagged ``needs_review`` that still stands
    and that nobody has overridden yet."""
    svc = service(request)
    require_staff(request, session)
    open_requests = session.scalars(
        select(RegradeRequest).where(RegradeRequest.state == "open").order_by(RegradeRequest.id)
    ).all()
    request_subs = {r.id: session.get(Submission, r.submission_id) for r in open_requests}
    vetoed: list[tuple[Submission, User | None, dict[str, Any]]] = []
    reviewed = set(session.scalars(select(Override.submission_id)).all())
    for sub in session.scalars(
        select(Submission).where(Submission.status == "graded").order_by(Submission.id.desc()).limit(500)
    ):
        if sub.id in reviewed:
            continue
        _raw, eff = results.load(session, svc.course, sub)
        if eff and any(v.get("needs_review") for v in eff["vetoes"]):
            vetoed.append((sub, session.get(User, sub.user_id), eff))
    users = {u.id: u for u in session.scalars(select(User))}
    return svc.render(
        request, "review.html", requests=open_requests, request_subs=request_subs, vetoed=vetoed, users=users,
        item_names=ITEM_NAMES,
    )  # fmt: skip


@router.post("/regrade-requests/{request_id}")
def resolve_request(request: Request, request_id: int, session: DBW, form: PostedForm) -> Response:
    viewer = require_staff(request, session)
    check_csrf(request, viewer, form)
    row = session.get(RegradeRequest, request_id)
    if row is None:
        raise HTTPException(404)
    state = str(form.get("state") or "")
    if state not in ("accepted", "rejected"):
        raise HTTPException(400, "请选择接受或驳回。")
    row.state, row.response = state, str(form.get("response") or "").strip()[:4000]
    row.resolved_by, row.resolved_at = viewer.user.id, utcnow()
    session.commit()
    return RedirectResponse("/staff/review", status_code=303)


@router.post("/lessons/{slug}/answers")
def answers(request: Request, slug: str, session: DBW, form: PostedForm) -> Response:
    """Release or hide a lesson's answers now (the code of ``course answers``), or at its deadline."""
    svc = service(request)
    viewer = require_staff(request, session, instructor=True)
    _lesson(svc.course, slug)
    check_csrf(request, viewer, form)
    action = str(form.get("action") or "")
    if action in ("release", "hide"):
        set_release(svc.course, slug, action == "release")
        session.execute(delete(ScheduledRelease).where(ScheduledRelease.lesson == slug))
    elif action == "schedule":
        deadline = svc.course.service.deadlines.get(slug)
        if deadline is None:
            raise HTTPException(400, "本课没有设置截止时间（course.deadlines），无法按截止时间发布。")
        session.merge(
            ScheduledRelease(lesson=slug, at=deadline.astimezone(UTC).replace(tzinfo=None), actor_id=viewer.user.id)
        )
    else:
        raise HTTPException(400, "未知操作。")
    session.add(AuditEntry(actor_id=viewer.user.id, action=f"answers-{action}", detail=slug))
    session.commit()
    return RedirectResponse("/staff", status_code=303)


def run_due_releases(factory: sessionmaker[Session], course: Course) -> list[str]:
    """Release the answers whose scheduled time has come (called by ``course serve`` every few seconds)."""
    done = []
    with factory.begin() as session:
        for row in session.scalars(select(ScheduledRelease).where(ScheduledRelease.at <= utcnow())).all():
            set_release(course, row.lesson, True)
            session.add(AuditEntry(actor_id=row.actor_id, action="answers-release-scheduled", detail=row.lesson))
            session.delete(row)
            done.append(row.lesson)
    return done


@router.get("/roster")
def roster_page(request: Request, session: DB) -> Response:
    svc = service(request)
    require_staff(request, session, instructor=True)
    users = session.scalars(select(User).order_by(User.role, User.username)).all()
    return svc.render(request, "roster.html", users=users, roles=ROLES, invitations=[], error=None)


def _roster_result(request: Request, session: Session, invitations: list[Any], error: str | None) -> Response:
    users = session.scalars(select(User).order_by(User.role, User.username)).all()
    return service(request).render(
        request, "roster.html", status=400 if error else 200, users=users, roles=ROLES, invitations=invitations,
        error=error,
    )  # fmt: skip


@router.post("/roster/import")
def roster_import(request: Request, session: DBW, form: PostedForm) -> Response:
    """Create the students of an uploaded roster.csv; their invitation codes are shown once."""
    viewer = require_staff(request, session, instructor=True)
    check_csrf(request, viewer, form)
    upload = form.get("roster")
    if not isinstance(upload, UploadFile):
        return _roster_result(request, session, [], "请选择 roster.csv 文件。")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "roster.csv"
        path.write_bytes(upload.file.read(1_000_000))
        try:
            roster = load_roster(path, "roster.csv")
        except CourseError as exc:
            return _roster_result(request, session, [], str(exc))
    made, _kept = accounts.import_roster(session, roster, viewer.user.id)
    session.commit()
    return _roster_result(request, session, made, None)


@router.post("/users")
def add_user(request: Request, session: DBW, form: PostedForm) -> Response:
    viewer = require_staff(request, session, instructor=True)
    check_csrf(request, viewer, form)
    try:
        made = accounts.add_user(
            session, str(form.get("username") or "").strip(), str(form.get("role") or ""),
            str(form.get("name") or "").strip()[:200], viewer.user.id,
        )  # fmt: skip
    except CourseError as exc:
        return _roster_result(request, session, [], str(exc))
    session.commit()
    return _roster_result(request, session, [made], None)


@router.post("/users/{user_id}/reissue")
def reissue(request: Request, user_id: int, session: DBW, form: PostedForm) -> Response:
    """A new invitation code for a user who lost their password; their sessions end."""
    viewer = require_staff(request, session, instructor=True)
    check_csrf(request, viewer, form)
    user = session.get(User, user_id)
    if user is None:
        raise HTTPException(404)
    made = accounts.reissue(session, user, viewer.user.id)
    end_all_sessions(session, user)
    session.commit()
    return _roster_result(request, session, [made], None)


__all__ = ["router", "run_due_releases", "STATUS_TEXT"]
