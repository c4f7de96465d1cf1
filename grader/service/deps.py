"""What every route depends on: the service object, the database session, the viewer, CSRF.

Access rules live here, once: ``require_user`` (login, and a password set), ``require_staff`` (404 to
everyone else) and ``check_csrf`` (every POST form carries the session's CSRF token).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import FormData

from ..course import Course
from . import auth
from .models import STAFF, User
from .models import Session as SessionRow
from .settings import Settings
from .store import UploadStore


@dataclass
class Service:
    """What every route needs, kept on ``app.state.service``."""

    settings: Settings
    course: Course
    factory: sessionmaker[Session]  # for writing: transactions take the write lock at once
    reader: sessionmaker[Session]  # for reading
    store: UploadStore  # files (embedded) or the database (celery): ``put_in`` and ``read`` either way
    templates: Environment
    workers: Callable[[], int | None] = field(default=lambda: None)  # grading workers now; None: unknown

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        viewer = getattr(request.state, "viewer", None)
        page = self.templates.get_template(name).render(viewer=viewer, course=self.course, **context)
        return HTMLResponse(page, status_code=status)


@dataclass
class Viewer:
    """The logged-in user of a request, with their session (for the CSRF token)."""

    user: User
    session: SessionRow
    token: str

    @property
    def is_staff(self) -> bool:
        return self.user.role in STAFF

    @property
    def is_instructor(self) -> bool:
        return self.user.role == "instructor"


class LoginRequired(Exception):
    pass


def service(request: Request) -> Service:
    found: Service = request.app.state.service
    return found


def db(request: Request) -> Iterator[Session]:
    """A session for reading (GET routes)."""
    with service(request).reader() as session:
        yield session


def db_write(request: Request) -> Iterator[Session]:
    """A session whose transaction takes the write lock at once (POST routes); see ``db.make_engine``."""
    with service(request).factory() as session:
        yield session


def viewer_of(request: Request, session: Session) -> Viewer | None:
    token = request.cookies.get(auth.COOKIE)
    found = auth.find_session(session, token)
    if found is None or token is None:
        return None
    viewer = Viewer(found[1], found[0], token)
    request.state.viewer = viewer
    return viewer


def require_user(request: Request, session: Session, *, allow_pending: bool = False) -> Viewer:
    """The viewer, or LoginRequired. A user who logged in with an invitation code must set a password first."""
    viewer = viewer_of(request, session)
    if viewer is None:
        raise LoginRequired
    if viewer.user.password_hash is None and not allow_pending:
        raise HTTPException(303, headers={"Location": "/password"})
    return viewer


def require_staff(request: Request, session: Session, *, instructor: bool = False) -> Viewer:
    """Staff only. Others get 404, as if the page did not exist, so that ids and pages leak nothing."""
    viewer = require_user(request, session)
    if not viewer.is_staff or (instructor and not viewer.is_instructor):
        raise HTTPException(404)
    return viewer


async def read_form(request: Request) -> FormData:
    """The POSTed form, parsed on the event loop; the route itself then runs in a worker thread, so
    that its database and disk work never blocks other requests."""
    return await request.form(max_files=1, max_fields=16)


def check_csrf(request: Request, viewer: Viewer | None, form: FormData) -> None:
    """403 unless the form's CSRF token is the session's (or, to log in, the login cookie's)."""
    expected = viewer.session.csrf if viewer is not None else request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not auth.csrf_ok(expected, form.get("csrf")):
        raise HTTPException(403, "表单已过期或来源不明（CSRF 校验失败）。请返回上一页刷新后重试。")


LOGIN_CSRF_COOKIE = "course_login_csrf"


DB = Annotated[Session, Depends(db)]
DBW = Annotated[Session, Depends(db_write)]
PostedForm = Annotated[FormData, Depends(read_form)]
