"""Helpers for the service's tests and bench: accounts with known passwords, logging in, CSRF tokens.

Not used by the service itself.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
from sqlalchemy.orm import Session, sessionmaker

from .auth import hash_password
from .models import User

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def make_user(
    factory: sessionmaker[Session], username: str, role: str = "student", password: str = "password-1"
) -> int:
    """An account with a password set (no invitation step); returns its id."""
    with factory.begin() as session:
        user = User(username=username, name=username, role=role, password_hash=hash_password(password))
        session.add(user)
        session.flush()
        return user.id


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    if found is None:
        raise AssertionError("no CSRF token in the page")
    return found.group(1)


def login(client: Any, username: str, password: str = "password-1") -> str:
    """Log a TestClient or httpx2.Client in; return the session's CSRF token."""
    page = client.get("/login")
    response = client.post(
        "/login", data={"csrf": csrf_of(page.text), "username": username, "password": password}, follow_redirects=False
    )
    if response.status_code != 303:
        raise AssertionError(f"login of {username} failed: {response.status_code}")
    return csrf_of(client.get("/lessons").text)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` until it returns something true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@contextmanager
def serving(
    data: Path, course_root: Path, workers: int = 1, **env: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``course serve`` as a subprocess on 127.0.0.1 and a free port; yields it and its base URL.

    Its stderr goes to ``serve.log`` in the data folder (appended to, across restarts).
    """
    port = free_port()
    cmd = [sys.executable, "-m", "grader.cli", "--root", str(course_root), "serve", "--data", str(data)]
    cmd += ["--port", str(port), "--workers", str(workers)]
    log = data / "serve.log"
    with log.open("ab") as err:
        proc = subprocess.Popen(cmd, env={**os.environ, **env}, stderr=err)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx2.get(f"{base}/login", timeout=2).status_code == 200
        except httpx2.TransportError:
            if proc.poll() is not None:
                raise AssertionError(f"course serve exited:\n{log.read_text(errors='replace')}") from None
            return False

    try:
        wait_for(up, 60, "course serve to start")
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
