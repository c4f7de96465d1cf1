"""Passwords, invitation codes, server-side sessions, CSRF tokens and login rate limits.

- Passwords are hashed with argon2id (argon2-cffi); invitation codes and session tokens are random,
  and only their sha256 is stored, so a copy of the database opens no account.
- A session is a random token in an HttpOnly, SameSite=Lax cookie; its CSRF token (a synchronizer
  token) is kept beside it and must come back in every POST form.
- Failed logins are stored in the database (so the limit holds across processes), per user name and
  per client address. Unknown user and wrong password get the same answer and take the same time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from .models import LoginFailure, User, utcnow
from .models import Session as SessionRow

COOKIE = "course_session"
SESSION_DAYS = 7
MIN_PASSWORD = 8
_hasher = PasswordHasher()
_DUMMY_HASH = _hasher.hash("not a real password; used to spend the same time on unknown users")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def new_invite_code() -> str:
    """A one-time code a student types once, with their id, to set a password."""
    return secrets.token_urlsafe(12)


@dataclass(frozen=True)
class LoginOutcome:
    user: User | None
    must_set_password: bool = False


def check_login(session: Session, username: str, secret: str) -> LoginOutcome:
    """The user if ``secret`` is their password or their unused invitation code; else no user. Reads only."""
    user = session.scalar(select(User).where(User.username == username, User.active.is_(True)))
    if user is None:
        _verify(_DUMMY_HASH, secret)
        return LoginOutcome(None)
    if user.password_hash is not None and _verify(user.password_hash, secret):
        return LoginOutcome(user)
    if user.password_hash is None:
        _verify(_DUMMY_HASH, secret)
    if user.invite_hash is not None and hmac.compare_digest(user.invite_hash, sha256(secret)):
        return LoginOutcome(user, must_set_password=True)
    return LoginOutcome(None)


def _verify(hashed: str, secret: str) -> bool:
    try:
        return _hasher.verify(hashed, secret)
    except (VerificationError, InvalidHashError):
        return False


def set_password(session: Session, user: User, password_hash: str) -> None:
    """Set the password (hashed by ``hash_password``) and spend the invitation code; every session of
    the user ends (the caller starts a new one)."""
    user.password_hash = password_hash
    user.invite_hash = None
    session.execute(delete(SessionRow).where(SessionRow.user_id == user.id))


def start_session(session: Session, user_id: int) -> tuple[str, SessionRow]:
    """A new session; returns the cookie value (never stored) and the row."""
    token = secrets.token_urlsafe(32)
    row = SessionRow(
        token_hash=sha256(token),
        user_id=user_id,
        csrf=secrets.token_urlsafe(32),
        expires_at=utcnow() + timedelta(days=SESSION_DAYS),
    )
    session.add(row)
    return token, row


def find_session(session: Session, token: str | None) -> tuple[SessionRow, User] | None:
    if not token or len(token) > 200:
        return None
    row = session.scalar(select(SessionRow).where(SessionRow.token_hash == sha256(token)))
    if row is None or row.expires_at < utcnow():
        return None
    user = session.get(User, row.user_id)
    if user is None or not user.active:
        return None
    return row, user


def end_session(session: Session, token: str | None) -> None:
    if token:
        session.execute(delete(SessionRow).where(SessionRow.token_hash == sha256(token)))


def csrf_ok(expected: str, given: object) -> bool:
    return isinstance(given, str) and bool(given) and hmac.compare_digest(expected, given)


def too_many_failures(session: Session, limits: dict[str, int], window_s: int) -> bool:
    """Whether any key (user name, client address) has reached its limit of failures in the window."""
    since = utcnow() - timedelta(seconds=window_s)
    for key, limit in limits.items():
        count = session.scalar(
            select(func.count()).select_from(LoginFailure).where(LoginFailure.key == key, LoginFailure.at >= since)
        )
        if (count or 0) >= limit:
            return True
    return False


def record_failure(session: Session, keys: list[str], window_s: int) -> None:
    session.execute(delete(LoginFailure).where(LoginFailure.at < utcnow() - timedelta(seconds=window_s)))
    session.add_all(LoginFailure(key=key) for key in keys)


def login_keys(username: str, client: str) -> list[str]:
    return [f"user:{username[:100]}", f"ip:{client[:100]}"]


def end_all_sessions(session: Session, user: User) -> None:
    session.execute(delete(SessionRow).where(SessionRow.user_id == user.id))
