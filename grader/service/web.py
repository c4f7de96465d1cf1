"""The web room: ``create_app(settings)`` builds the FastAPI app; routes live in ``student`` and ``staff``,
what they depend on in ``deps``.

Cross-cutting rules are enforced here, once: security headers on every response, a request-body
limit enforced while the body streams in, login required (redirect for pages, 401 for ``/api/``),
CSRF on every POST, and Chinese error pages. Jinja2 autoescapes everything it renders.
"""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..course import Course, load_course
from . import metrics, staff, student
from .db import make_engine, migrate, session_factory
from .deps import LoginRequired, Service, service
from .distributed import DatabaseUploads
from .settings import Settings
from .store import UploadStore

HERE = Path(__file__).parent
FORM_OVERHEAD = 64 * 1024  # multipart boundaries and the small fields beside the file
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


def create_app(
    settings: Settings, course: Course | None = None, workers: Callable[[], int | None] | None = None
) -> FastAPI:
    """The whole web app; migrates the database to the newest schema first.

    ``workers`` counts the grading workers for the instructor's page and ``/metrics`` (the engine
    knows them: the embedded supervisor its processes, Celery by a ping); without it they show as
    unknown.
    """
    course = course or load_course(settings.course_root)
    settings.data.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.db_url)
    migrate(engine)
    factory = session_factory(engine)
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True))
    env.filters["urlquote"] = lambda s: quote(str(s), safe="")
    app = FastAPI(title="course", docs_url=None, redoc_url=None, openapi_url=None)
    reader = session_factory(make_engine(settings.db_url, immediate=False))
    store = DatabaseUploads(factory) if settings.engine == "celery" else UploadStore(settings.uploads)
    count = workers or (lambda: None)
    app.state.service = Service(settings, course, factory, reader, store, env, count)
    metrics.install(app, reader, count)
    app.include_router(student.router)
    app.include_router(staff.router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @app.exception_handler(LoginRequired)
    async def _login(request: Request, _exc: LoginRequired) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"detail": "login required"}, status_code=401)
        target = request.url.path if request.method == "GET" else "/lessons"
        return RedirectResponse(f"/login?next={quote(target, safe='/')}", status_code=303)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 303 and exc.headers:
            return RedirectResponse(exc.headers["Location"], status_code=303)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
        message = exc.detail if isinstance(exc.detail, str) and exc.status_code != 404 else None
        return service(request).render(
            request, "message.html", status=exc.status_code, title=_TITLES.get(exc.status_code, "出错了"),
            message=message or _TEXTS.get(exc.status_code, ""),
        )  # fmt: skip

    app.add_middleware(BodyLimit, limit=course.limits.upload_bytes + FORM_OVERHEAD)
    app.add_middleware(SecurityHeaders)  # outermost of ours: the 413 above gets the headers too
    return app


class BodyTooLarge(Exception):
    pass


_TITLES = {403: "无权操作", 404: "页面不存在", 413: "文件太大", 429: "尝试次数过多"}
_TEXTS = {404: "没有这个页面，或者你无权查看它。"}


class SecurityHeaders:
    """Adds CSP, frame-ancestors, nosniff and a referrer policy to every response, static files included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


class BodyLimit:
    """Refuses a request body over ``limit`` bytes while it streams in, before anything is parsed or stored."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await self._refuse(send)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Callable[[Message], Awaitable[None]]) -> None:
        mb = (self.limit - FORM_OVERHEAD) / 1_000_000
        body = (
            '<!doctype html><html lang="zh"><meta charset="utf-8"><title>文件太大</title>'
            f"<p>文件太大：上限约 {html.escape(f'{mb:g}')} MB。请在 Jupyter 中清除输出（Kernel → Restart &amp; Clear Output）后重新提交。"
            '<p><a href="/lessons">返回课程列表</a>'
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"text/html; charset=utf-8"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body})
