"""``course backup``: a consistent copy of a running service's database and uploads.

The database is copied with SQLite's online backup API (readers and writers carry on). Uploads are
copied after it: a file is always stored before the row naming it is committed, so every file the
copied database names is already on disk. Stored files never change (content-addressed), so an
existing copy is kept.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from ..errors import CourseError
from .settings import Settings


def backup(settings: Settings, out: Path) -> tuple[Path, int]:
    """Write ``out/course.db`` and ``out/uploads/``; return the database copy and the files copied."""
    if settings.database_url and not settings.database_url.startswith("sqlite"):
        raise CourseError("course backup copies the embedded SQLite database; back up PostgreSQL with pg_dump")
    source = settings.data / "course.db"
    if not source.is_file():
        raise CourseError(f"{source}: no database here; is --data the service's data folder?")
    if out.resolve() == settings.data.resolve() or settings.data.resolve() in out.resolve().parents:
        raise CourseError(f"{out}: the backup must not go inside the data folder it copies")
    out.mkdir(parents=True, exist_ok=True)
    target = out / "course.db"
    partial = out / "course.db.partial"
    partial.unlink(missing_ok=True)
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    dst = sqlite3.connect(partial)
    try:
        with dst:
            src.backup(dst)
    finally:
        src.close()
        dst.close()
    partial.replace(target)
    copied = 0
    for path in sorted(settings.uploads.glob("*/*.ipynb")):
        dest = out / "uploads" / path.parent.name / path.name
        if dest.is_file() and dest.stat().st_size == path.stat().st_size:
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
        copied += 1
    return target, copied
