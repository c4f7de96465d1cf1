"""``course serve --demo``: a roster, two accounts with known passwords and the sample submissions,
so that a newcomer can click through in a minute. Only for a local try-out: the passwords are public.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ..roster import load_roster
from . import queue
from .accounts import import_roster
from .auth import hash_password
from .models import Submission, User
from .store import UploadStore

STUDENT = ("2026001", "demo-student")
INSTRUCTOR = ("teacher", "demo-teacher")


def seed(factory: sessionmaker[Session], store: UploadStore, course_root: Path) -> bool:
    """Seed an empty service; return False (and change nothing) when it has users already."""
    with factory.begin() as session:
        if session.scalar(select(User.id).limit(1)) is not None:
            return False
        roster = load_roster(course_root / "examples/roster.csv", "examples/roster.csv")
        import_roster(session, roster)
        session.flush()
        student = session.scalar(select(User).where(User.username == STUDENT[0]))
        assert student is not None
        student.password_hash, student.invite_hash = hash_password(STUDENT[1]), None
        session.add(
            User(username=INSTRUCTOR[0], name="演示教师", role="instructor", password_hash=hash_password(INSTRUCTOR[1]))
        )
        for path in sorted((course_root / "examples/submissions/lesson04").glob("*/lesson04.ipynb")):
            owner = session.scalar(select(User).where(User.username == path.parent.name))
            if owner is None:
                continue
            data = path.read_bytes()
            sub = Submission(user_id=owner.id, lesson="lesson04", sha256=store.put_in(session, data), size=len(data))
            session.add(sub)
            session.flush()
            queue.enqueue(session, sub.id)
    return True
