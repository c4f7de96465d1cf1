"""Routes every user has: log in, set a password, lessons, upload, a submission's status and feedback.

Every route that names a submission goes through ``own_submission``: another student's id is a 404.
"""

from __future__ import annotations

import json
import os
import secrets
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from markdown_it import MarkdownIt
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starlette.datastructures import UploadFile

from ..notebook import build_notebook, dumps
from ..report import feedback_markdown
from ..submission import SubmissionError, lesson_of, read_notebook
from . import auth, queue, results
from .deps import DB, DBW, LOGIN_CSRF_COOKIE, PostedForm, Viewer, check_csrf, require_user, service, viewer_of
from .models import AuditEntry, RegradeRequest, Submission, User, utcnow
from .store import StoreFull

router = APIRouter()
_MD = MarkdownIt("commonmark", {"html": False})  # the report's own settings: raw HTML is escaped
CHUNK = 64 * 1024
CRASH_ENV = "COURSE_TEST_CRASH_AT"  # test-only: after-store | after-commit (see docs/service.md)
STATUS_TEXT = {"queued": "排队中", "running": "评分中", "graded": "已评分", "failed": "无法评分"}
ITEM_NAMES = {"code": "代码填空", "q1": "问题 1", "q2": "问题 2", "q3": "问题 3"}


def own_submission(session: Session, viewer: Viewer, submission_id: int) -> Submission:
    """The submission if the viewer may see it (their own, or any for staff); else 404."""
    sub = session.get(Submission, submission_id)
    if sub is None or (sub.user_id != viewer.user.id and not viewer.is_staff):
        raise HTTPException(404)
    return sub


def _set_cookie(response: Response, request: Request, name: str, value: str, max_age: int | None = None) -> None:
    secure = service(request).settings.secure_cookies
    response.set_cookie(name, value, max_age=max_age, httponly=True, samesite="lax", secure=secure, path="/")


@router.get("/")
def home() -> Response:
    return RedirectResponse("/lessons", status_code=303)


@router.get("/login")
def login_page(request: Request, next: str = "/lessons") -> Response:
    token = secrets.token_urlsafe(32)
    response = service(request).render(request, "login.html", csrf=token, next=_safe_next(next), error=None)
    _set_cookie(response, request, LOGIN_CSRF_COOKIE, token, max_age=3600)
    return response


def _safe_next(target: str) -> str:
    """Only a path on this site (no ``//host`` or scheme): an open redirect helps phishing."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/lessons"


@router.post("/login")
def login(request: Request, session: DB, form: PostedForm) -> Response:
    """Checks (and argon2's deliberate slowness) run on a reading session; only the outcome is written,
    in a short transaction, so that logins never hold up uploads or workers."""
    svc = service(request)
    check_csrf(request, None, form)
    username = str(form.get("username") or "").strip()
    secret = str(form.get("password") or "")
    target = _safe_next(str(form.get("next") or "/lessons"))
    keys = auth.login_keys(username, request.client.host if request.client else "?")
    window = svc.settings.login_window_s
    limits = dict(zip(keys, (svc.settings.login_limit, svc.settings.login_ip_limit)))
    csrf = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if auth.too_many_failures(session, limits, window):
        return svc.render(
            request, "login.html", status=429, csrf=csrf, next=target,
            error=f"登录失败次数过多，请 {window // 60} 分钟后再试。",
        )  # fmt: skip
    outcome = auth.check_login(session, username, secret)
    user_id = outcome.user.id if outcome.user is not None else None
    session.rollback()
    with svc.factory.begin() as write:
        if user_id is None:
            auth.record_failure(write, keys, window)
        else:
            token, _row = auth.start_session(write, user_id)
    if user_id is None:
        return svc.render(request, "login.html", status=400, csrf=csrf, next=target, error="用户名或密码错误。")
    response = RedirectResponse("/password" if outcome.must_set_password else target, status_code=303)
    _set_cookie(response, request, auth.COOKIE, token, max_age=auth.SESSION_DAYS * 86400)
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/")
    return response


@router.post("/logout")
def logout(request: Request, session: DBW, form: PostedForm) -> Response:
    viewer = require_user(request, session, allow_pending=True)
    check_csrf(request, viewer, form)
    auth.end_session(session, viewer.token)
    session.commit()
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(auth.COOKIE, path="/")
    return response


@router.get("/password")
def password_page(request: Request, session: DB) -> Response:
    viewer = require_user(request, session, allow_pending=True)
    return service(request).render(request, "password.html", error=None, first=viewer.user.password_hash is None)


@router.post("/password")
def set_password(request: Request, session: DB, form: PostedForm) -> Response:
    svc = service(request)
    viewer = require_user(request, session, allow_pending=True)
    check_csrf(request, viewer, form)
    first = viewer.user.password_hash is None
    new, again = str(form.get("new") or ""), str(form.get("again") or "")
    error = None
    if not first and auth.check_login(session, viewer.user.username, str(form.get("old") or "")).user is None:
        error = "当前密码不正确。"
    elif len(new) < auth.MIN_PASSWORD:
        error = f"新密码至少 {auth.MIN_PASSWORD} 个字符。"
    elif new != again:
        error = "两次输入的新密码不一致。"
    if error:
        return svc.render(request, "password.html", status=400, error=error, first=first)
    hashed = auth.hash_password(new)  # slow on purpose: done before the write transaction
    user_id = viewer.user.id
    session.rollback()
    with svc.factory.begin() as write:
        user = write.get(User, user_id)
        if user is None:
            raise HTTPException(404)
        auth.set_password(write, user, hashed)
        token, _row = auth.start_session(write, user_id)
    response = RedirectResponse("/lessons", status_code=303)
    _set_cookie(response, request, auth.COOKIE, token, max_age=auth.SESSION_DAYS * 86400)
    return response


@router.get("/lessons")
def lessons(request: Request, session: DB) -> Response:
    """Open to everyone: titles and deadlines; a logged-in student also sees their status."""
    svc = service(request)
    viewer = viewer_of(request, session)
    status: dict[str, str] = {}
    if viewer is not None:
        for slug in svc.course.lessons:
            status[slug] = _lesson_status(session, svc, viewer.user, slug)
    rows = sorted(svc.course.lessons.values(), key=lambda lesson: lesson.number)
    return svc.render(request, "lessons.html", lessons=rows, statuses=status, deadline=_deadline_text)


def _deadline_text(slug: str, course: Any) -> str:
    when = course.service.deadlines.get(slug)
    return when.strftime("%Y-%m-%d %H:%M %Z").strip() if when else "无"


def _lesson_status(session: Session, svc: Any, user: User, slug: str) -> str:
    subs = session.scalars(
        select(Submission).where(Submission.user_id == user.id, Submission.lesson == slug).order_by(Submission.id)
    ).all()
    if not subs:
        return "未提交"
    best = None
    for sub in subs:
        _raw, eff = results.load(session, svc.course, sub)
        if eff is not None and eff.get("graded") and (best is None or eff["total"] >= best["total"]):
            best = eff
    latest = STATUS_TEXT.get(subs[-1].status, subs[-1].status)
    if best is None:
        return f"{len(subs)} 次提交，最新：{latest}"
    verdict = "通过" if best["passed"] else "未通过"
    return f"{len(subs)} 次提交，最好 {best['total']:g}/10（{verdict}），最新：{latest}"


def _today_start() -> datetime:
    now = utcnow()
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def _attempts_today(session: Session, user: User, slug: str) -> int:
    return (
        session.scalar(
            select(func.count())
            .select_from(Submission)
            .where(Submission.user_id == user.id, Submission.lesson == slug, Submission.created_at >= _today_start())
        )
        or 0
    )


def _lesson_or_404(svc: Any, slug: str) -> Any:
    if slug not in svc.course.lessons:
        raise HTTPException(404)
    return svc.course.lessons[slug]


@router.get("/lessons/{slug}")
def lesson_page(request: Request, slug: str, session: DB) -> Response:
    viewer = require_user(request, session)
    return _lesson_view(request, session, viewer, slug)


def _lesson_view(
    request: Request, session: Session, viewer: Viewer, slug: str, status: int = 200, refusal: str | None = None
) -> Response:
    """The lesson page: deadline, attempts left, upload form, and the viewer's attempts (a refusal on top)."""
    svc = service(request)
    lesson = _lesson_or_404(svc, slug)
    subs = session.scalars(
        select(Submission)
        .where(Submission.user_id == viewer.user.id, Submission.lesson == slug)
        .order_by(Submission.id.desc())
    ).all()
    history = [(s, results.load(session, svc.course, s)[1]) for s in subs]
    return svc.render(
        request, "lesson.html", status=status, lesson=lesson, history=history,
        used=_attempts_today(session, viewer.user, slug), deadline=_deadline_text(slug, svc.course),
        refusal=refusal, status_text=STATUS_TEXT, max_mb=svc.course.limits.upload_bytes / 1_000_000,
    )  # fmt: skip


@router.get("/lessons/{slug}/notebook")
def lesson_notebook(request: Request, slug: str, session: DB) -> Response:
    svc = service(request)
    require_user(request, session)
    lesson = _lesson_or_404(svc, slug)
    return Response(
        dumps(build_notebook(lesson)),
        media_type="application/x-ipynb+json",
        headers={"Content-Disposition": f'attachment; filename="{slug}.ipynb"'},
    )


def _refuse(request: Request, session: Session, viewer: Viewer, slug: str, status: int, text: str) -> Response:
    return _lesson_view(request, session, viewer, slug, status, text)


@router.post("/lessons/{slug}/submit")
def submit(request: Request, slug: str, session: DBW, form: PostedForm) -> Response:
    """Check, store durably, record with its job in one transaction; only then say "accepted"."""
    svc = service(request)
    viewer = require_user(request, session)
    _lesson_or_404(svc, slug)
    check_csrf(request, viewer, form)
    course, user = svc.course, viewer.user
    now = utcnow()
    deadline = course.service.deadlines.get(slug)
    if (
        deadline is not None
        and course.service.late_policy == "lock"
        and now > deadline.astimezone(UTC).replace(tzinfo=None)
    ):
        return _refuse(request, session, viewer, slug, 403, "本课已过截止时间，不再接受提交。")
    if user.role == "student" and _attempts_today(session, user, slug) >= course.service.attempts_per_day:
        return _refuse(
            request, session, viewer, slug, 429,
            f"今天本课的提交次数已用完（每天 {course.service.attempts_per_day} 次）。请先根据反馈和自查单元修改，明天再提交。",
        )  # fmt: skip
    session.commit()  # end the checks' transaction: parsing and fsyncing the file hold no database lock
    upload = form.get("notebook")
    if not isinstance(upload, UploadFile):
        return _refuse(request, session, viewer, slug, 400, "请选择要提交的 .ipynb 文件。")
    data = _read_limited(upload, course.limits.upload_bytes)
    if data is None:
        return _refuse(
            request, session, viewer, slug, 413,
            f"文件超过上限 {course.limits.upload_bytes:,} 字节。请清除输出（Kernel → Restart & Clear Output）后重新提交。",
        )  # fmt: skip
    try:
        found = lesson_of(read_notebook(data, f"{slug}.ipynb", course.limits.upload_bytes))
    except SubmissionError as exc:
        return _refuse(request, session, viewer, slug, 400, str(exc))
    if found != slug:
        shown = found if found in course.lessons else "未知课次"
        return _refuse(
            request, session, viewer, slug, 400,
            f"这份 notebook 属于 {shown}，不是 {slug}。请提交本课的 notebook。",
        )  # fmt: skip
    try:
        digest = svc.store.put_in(session, data)
    except StoreFull:
        return _refuse(
            request, session, viewer, slug, 507, "服务器存储空间已满，这次提交没有保存。请稍后再试，并告知助教。"
        )
    _test_crash("after-store")
    sub = Submission(
        user_id=user.id,
        lesson=slug,
        sha256=digest,
        size=len(data),
        late_days=results.late_days(course, slug, now),
        created_at=now,
    )
    session.add(sub)
    session.flush()
    try:
        queue.enqueue(session, sub.id, svc.settings.max_queued)
    except queue.QueueFull:
        session.rollback()
        return _refuse(request, session, viewer, slug, 503, "评分队列已满，这次提交没有保存。请几分钟后再试。")
    session.commit()
    _test_crash("after-commit")
    return RedirectResponse(f"/submissions/{sub.id}", status_code=303)


def _test_crash(point: str) -> None:
    """Test-only: die at ``point`` as a power cut would, so tests can check nothing is half stored."""
    if os.environ.get(CRASH_ENV) == point:
        os._exit(70)


def _read_limited(upload: UploadFile, limit: int) -> bytes | None:
    """The file's bytes, or None as soon as more than ``limit`` arrive."""
    parts, size = [], 0
    while chunk := upload.file.read(CHUNK):
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


@router.get("/submissions/{submission_id}")
def submission_page(request: Request, submission_id: int, session: DB) -> Response:
    svc = service(request)
    viewer = require_user(request, session)
    sub = own_submission(session, viewer, submission_id)
    raw, eff = results.load(session, svc.course, sub)
    feedback = _MD.render(feedback_markdown(eff)) if eff is not None else ""
    owner = session.get(User, sub.user_id)
    requests = session.scalars(
        select(RegradeRequest).where(RegradeRequest.submission_id == sub.id).order_by(RegradeRequest.id)
    ).all()
    staff: dict[str, Any] = {}
    if viewer.is_staff:
        staff = {
            "raw": json.dumps(raw, ensure_ascii=False, indent=2) if raw else "",
            "overrides": results.overrides_of(session, sub.id),
            "actors": {u.id: u.username for u in session.scalars(select(User).where(User.role != "student"))},
            "vetoes": eff["vetoes"] if eff else [],
        }
    return svc.render(
        request, "submission.html", sub=sub, owner=owner, result=eff, feedback=feedback, requests=requests,
        staff=staff, status_text=STATUS_TEXT, item_names=ITEM_NAMES, refresh=sub.status in ("queued", "running"),
    )  # fmt: skip


@router.get("/api/submissions/{submission_id}/status")
def submission_status(request: Request, submission_id: int, session: DB) -> Response:
    """For polling: the status and, once graded, the total after overrides."""
    viewer = require_user(request, session)
    sub = own_submission(session, viewer, submission_id)
    _raw, eff = results.load(session, service(request).course, sub)
    body: dict[str, Any] = {"id": sub.id, "status": sub.status}
    if eff is not None:
        body.update(total=eff["total"], passed=eff["passed"])
    return JSONResponse(body)


@router.get("/submissions/{submission_id}/notebook")
def submission_notebook(request: Request, submission_id: int, session: DB) -> Response:
    """The submitted file, as a download (never rendered by this site)."""
    viewer = require_user(request, session)
    sub = own_submission(session, viewer, submission_id)
    return Response(
        service(request).store.read(sub.sha256),
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{sub.lesson}-{sub.id}.ipynb"'},
    )


@router.post("/submissions/{submission_id}/regrade-request")
def regrade_request(request: Request, submission_id: int, session: DBW, form: PostedForm) -> Response:
    viewer = require_user(request, session)
    sub = own_submission(session, viewer, submission_id)
    check_csrf(request, viewer, form)
    item = str(form.get("item") or "")
    comment = str(form.get("comment") or "").strip()
    if item not in ITEM_NAMES or not comment or len(comment) > 4000 or sub.status != "graded":
        raise HTTPException(400, "请选择一项并写明理由（最多 4000 字），且只能对已评分的提交申请复核。")
    session.add(RegradeRequest(submission_id=sub.id, item=item, comment=comment))
    session.add(AuditEntry(actor_id=viewer.user.id, action="regrade-request", detail=f"submission {sub.id} {item}"))
    session.commit()
    return RedirectResponse(f"/submissions/{sub.id}", status_code=303)
