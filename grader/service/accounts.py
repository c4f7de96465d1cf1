"""Accounts: students from the roster with one-time invitation codes, and staff accounts.

Codes are shown once (printed, or written to a CSV for the instructor) and stored only hashed.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..errors import CourseError
from ..roster import Roster
from .auth import new_invite_code, sha256
from .models import ROLES, AuditEntry, User

USERNAME = re.compile(r"[\w.@-]{1,64}")


@dataclass(frozen=True)
class Invitation:
    username: str
    name: str
    role: str
    code: str


def import_roster(session: Session, roster: Roster, actor_id: int | None = None) -> tuple[list[Invitation], list[str]]:
    """Create the roster's new students; return their invitations and the ids that already existed."""
    made: list[Invitation] = []
    existing: list[str] = []
    for student in roster.students.values():
        if session.scalar(select(User).where(User.username == student.id)) is not None:
            existing.append(student.id)
            continue
        code = new_invite_code()
        session.add(User(username=student.id, name=student.name, role="student", invite_hash=sha256(code)))
        made.append(Invitation(student.id, student.name, "student", code))
    session.add(AuditEntry(actor_id=actor_id, action="roster-import", detail=f"{len(made)} new, {len(existing)} kept"))
    return made, existing


def add_user(session: Session, username: str, role: str, name: str = "", actor_id: int | None = None) -> Invitation:
    """A new account of any role, with its invitation code."""
    if not USERNAME.fullmatch(username):
        raise CourseError(f"user name {username!r} must be 1-64 letters, digits, '.', '@', '_' or '-'")
    if role not in ROLES:
        raise CourseError(f"role {role!r}: use one of {', '.join(ROLES)}")
    if session.scalar(select(User).where(User.username == username)) is not None:
        raise CourseError(f"user {username!r} exists already")
    code = new_invite_code()
    session.add(User(username=username, name=name, role=role, invite_hash=sha256(code)))
    session.add(AuditEntry(actor_id=actor_id, action="user-add", detail=f"{username} ({role})"))
    return Invitation(username, name, role, code)


def reissue(session: Session, user: User, actor_id: int | None) -> Invitation:
    """A fresh invitation code (a student who forgot their password); the old password stops working."""
    code = new_invite_code()
    user.invite_hash, user.password_hash = sha256(code), None
    session.add(AuditEntry(actor_id=actor_id, action="invite-reissue", detail=user.username))
    return Invitation(user.username, user.name, user.role, code)


def invitations_csv(invitations: list[Invitation]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["username", "name", "role", "code"])
    writer.writerows([i.username, i.name, i.role, i.code] for i in invitations)
    return out.getvalue()
