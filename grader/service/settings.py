"""Where the service keeps its data and how it runs; one object passed to every room."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DATA = ".course-data"  # relative to the current folder; README and docs/service.md name it
DATA_ENV = "COURSE_DATA"
DATABASE_ENV = "COURSE_DATABASE_URL"
BROKER_ENV = "COURSE_BROKER_URL"
ENGINES = ("embedded", "celery")  # who hands jobs to workers: the serve process, or Celery (docs/service.md)


def data_dir(option: str | None) -> Path:
    """``--data``, else ``$COURSE_DATA``, else ``./.course-data``."""
    return Path(option or os.environ.get(DATA_ENV) or DEFAULT_DATA).resolve()


@dataclass(frozen=True)
class Settings:
    """Everything ``create_app`` and the workers need. Only ``data`` and ``course_root`` are required."""

    data: Path
    course_root: Path
    database_url: str | None = None  # default: SQLite in the data folder
    engine: str = "embedded"  # embedded: worker processes of `course serve`; celery: `course worker` hosts
    broker_url: str | None = None  # the Celery broker (engine celery only)
    workers: int = 2  # embedded only
    secure_cookies: bool = False  # True when served over https (sets the cookie's Secure flag)
    max_queued: int = 2000  # a full queue refuses uploads instead of growing without bound
    lease_seconds: float = 0.0  # 0: the course's submission timeout plus two minutes
    sandbox: bool = True
    login_limit: int = 10  # failed logins per user name per window
    login_ip_limit: int = 100  # per client address: a class behind one NAT shares an address
    login_window_s: int = 900

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data / 'course.db'}"

    @property
    def uploads(self) -> Path:
        return self.data / "uploads"
