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
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).with_name("migrations")


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
    return create_engine(url, pool_pre_ping=True)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest migration (a no-op when it is there already)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
