"""Database engine, sessions and migrations (Alembic, ``upgrade head`` on every start).

SQLite is the embedded default: WAL mode so that readers never wait for the writer, a busy timeout
so that the web process and the workers queue for the write lock instead of failing, and foreign
keys on. A transaction that reads and then writes must take the write lock when it begins
(``BEGIN IMMEDIATE``): a deferred one that has read an older snapshot fails at once with "database
is locked" when another process committed in between, whatever the busy timeout. So an engine made
for writing begins that way; one made for reading (``immediate=False``, the web's GET routes) does
not, and never waits for a writer. Any SQLAlchemy URL works, PostgreSQL included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from ..errors import CourseError

MIGRATIONS = Path(__file__).with_name("migrations")
CONNECT_TIMEOUT_S = 10  # a database host that does not answer is reported, not waited for


def make_engine(url: str, immediate: bool = True) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"

        @event.listens_for(engine, "connect")
        def _pragmas(conn: Any, _record: Any) -> None:
            conn.isolation_level = None  # SQLAlchemy's "begin" event below issues BEGIN, not pysqlite
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")  # a committed upload survives a power cut
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            conn.exec_driver_sql(begin)

        return engine
    connect_args = {"connect_timeout": CONNECT_TIMEOUT_S} if url.startswith("postgresql") else {}
    return create_engine(url, pool_pre_ping=True, connect_args=connect_args)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def check_database(url: str, setting: str = "--db") -> Engine:
    """An engine for ``url`` that has answered once, or a one-line CourseError naming ``setting``.

    ``course serve --engine celery`` and ``course worker`` run on hosts set up by hand: a typo in a
    URL or a database that is down must read as what to fix, not as a driver's traceback.
    """
    example = "e.g. postgresql+psycopg://course:SECRET@db.internal:5432/course"
    try:
        parsed = make_url(url)
        engine = make_engine(url)
    except ArgumentError:  # also an unknown dialect or driver (NoSuchModuleError); the URL may hold a password
        scheme = url.split("://")[0] if "://" in url else ""
        what = f"its scheme {scheme!r} names no installed database driver" if scheme else "it is not a URL"
        raise CourseError(f"{setting}: not a database URL this service can use ({what}); give {example}") from None
    shown = parsed.render_as_string(hide_password=True)
    try:
        with engine.connect():
            pass
    except SQLAlchemyError as exc:
        engine.dispose()
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise CourseError(
            f"{setting}: cannot reach the database {shown} ({reason}); start it, or fix the URL ({example})"
        ) from None
    return engine


def schema_revision(engine: Engine) -> str | None:
    """The migration the database is at (None: not migrated yet)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    """The newest migration of this checkout."""
    return ScriptDirectory.from_config(_config()).get_current_head()


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest migration (a no-op when it is there already)."""
    config = _config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
