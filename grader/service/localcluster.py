"""A whole distributed grading setup on one machine: redis-server, a throwaway PostgreSQL cluster,
``course serve --engine celery`` and N ``course worker`` processes, all on 127.0.0.1 and free ports.

The tests (tests/test_service_distributed.py) and the bench (bench/service_workers.py) use it; the
commands it runs are the ones docs/service.md gives for several hosts. Not used by the service itself.
"""

from __future__ import annotations

import ctypes
import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from . import celery_app
from .db import make_engine
from .models import User
from .testing import free_port, wait_for

REDIS_ENV = "COURSE_REDIS_SERVER"  # a redis-server binary that is not on PATH
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """In a child before exec: SIGTERM it when the process that started it dies (``PR_SET_PDEATHSIG``).

    The servers and workers run in sessions of their own, so a test run killed outright (a timeout,
    Ctrl-C twice) would otherwise leave them running on a shared machine.
    """
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def find_redis_server() -> str | None:
    return os.environ.get(REDIS_ENV) or shutil.which("redis-server")


def find_pg_bindir() -> Path | None:
    """Debian's PostgreSQL server programs (initdb, pg_ctl), the newest version installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def _as_postgres() -> dict[str, Any]:
    """Run PostgreSQL's programs as the ``postgres`` user when we are root (initdb refuses root)."""
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


@dataclass
class Redis:
    """redis-server with an append-only file fsynced on every write, so a restart loses no message."""

    binary: str
    folder: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        cmd = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.folder)]
        cmd += ["--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "yes"]
        with (self.folder / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, preexec_fn=die_with_parent)
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port)
        wait_for(lambda: _pings(client), 20, "redis-server to start")
        client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # redis flushes its append-only file and exits
            self.proc.wait(20)


def _pings(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - not up yet
        return False


@dataclass
class Postgres:
    """A PostgreSQL cluster in a folder of its own, trust auth for the user ``course`` on 127.0.0.1."""

    folder: Path
    bindir: Path
    port: int = field(default_factory=free_port)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://course@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        data = self.folder / "data"
        run = _as_postgres()
        initdb: list[str | Path] = [
            self.bindir / "initdb",
            "-D",
            data,
            "-U",
            "course",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]
        subprocess.run(initdb, check=True, capture_output=True, **run)
        # fsync off: a throwaway cluster for tests and the bench, never for a real course
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off"
        start: list[str | Path] = [
            self.bindir / "pg_ctl",
            "-D",
            data,
            "-o",
            opts,
            "-l",
            self.folder / "pg.log",
            "-w",
            "start",
        ]
        subprocess.run(start, check=True, capture_output=True, **run)

    def stop(self) -> None:
        stop: list[str | Path] = [self.bindir / "pg_ctl", "-D", self.folder / "data", "-m", "immediate", "stop"]
        subprocess.run(stop, capture_output=True, **_as_postgres())

    def create_database(self, name: str) -> str:
        """A new empty database; returns its URL."""
        engine = make_engine(self.url()).execution_options(isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.url(name)


@contextmanager
def local_servers(redis_binary: str, pg_bindir: Path) -> Iterator[tuple[Redis, Postgres]]:
    """Start redis-server and PostgreSQL in a temporary folder; stop both and remove it on exit."""
    folder = Path(tempfile.mkdtemp(prefix="course-dist-"))
    (folder / "pg").mkdir()
    (folder / "redis").mkdir()
    if os.geteuid() == 0:  # the postgres user must reach and own its folder
        entry = pwd.getpwnam("postgres")
        os.chown(folder / "pg", entry.pw_uid, entry.pw_gid)
        os.chmod(folder, 0o755)
    redis_server = Redis(redis_binary, folder / "redis")
    postgres = Postgres(folder / "pg", pg_bindir)
    try:
        redis_server.start()
        postgres.start()
        yield redis_server, postgres
    finally:
        postgres.stop()
        redis_server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def add_students(factory: sessionmaker[Session], prefix: str, count: int) -> list[int]:
    """``count`` student accounts without a password (no argon2 hashing: a batch is made at once)."""
    with factory.begin() as session:
        users = [User(username=f"{prefix}{i}", name=f"{prefix}{i}", role="student") for i in range(count)]
        session.add_all(users)
        session.flush()
        return [user.id for user in users]


@dataclass
class Cluster:
    """The web app (``course serve --engine celery``, with the dispatcher) and the workers
    (``course worker``) of one course checkout, as subprocesses, each in a session of its own.

    These are the commands docs/service.md gives for several hosts; here only the addresses are local.
    """

    root: Path
    db_url: str
    broker_url: str
    logs: Path
    lease_s: float = 8.0
    prefork: bool = False  # `course worker --prefork`: kernels forked from a zygote (root only)
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    web: subprocess.Popen[bytes] | None = None
    base_url: str = ""

    def _spawn(self, args: list[str], log_name: str, **env: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "grader.cli", "--root", str(self.root), *args]
        cmd += ["--db", self.db_url, "--broker", self.broker_url]
        with (self.logs / log_name).open("ab") as log:
            return subprocess.Popen(
                cmd,
                stderr=log,
                stdout=log,
                env={**os.environ, **env},
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def start_web(self, data: Path, timeout: float = 90) -> str:
        """``course serve --engine celery`` on 127.0.0.1 and a free port; returns its base URL once it answers."""
        port = free_port()
        args = ["serve", "--engine", "celery", "--data", str(data), "--host", "127.0.0.1", "--port", str(port)]
        self.web = self._spawn(args, "serve.log")
        self.base_url = f"http://127.0.0.1:{port}"
        web = self.web

        def up() -> bool:
            if web.poll() is not None:
                raise AssertionError(f"course serve exited ({web.returncode}):\n{self.log_tails()}")
            try:
                return httpx2.get(f"{self.base_url}/login", timeout=2).status_code == 200
            except httpx2.TransportError:
                return False

        wait_for(up, timeout, "course serve --engine celery to answer")
        return self.base_url

    def start_worker(self, name: str, **env: str) -> None:
        args = ["worker", "--name", name, "--lease", str(self.lease_s), *(["--prefork"] if self.prefork else [])]
        self.workers[name] = self._spawn(args, f"{name}.log", **env)

    def kill_worker(self, name: str) -> None:
        """SIGKILL a worker and its pool process at once, as if its host went down."""
        proc = self.workers.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def wait_for_workers(self, timeout: float = 90) -> None:
        """Until every worker answers a ping; a worker that exited fails at once, with the logs."""
        celery = celery_app.make_app(self.broker_url)

        def answering() -> bool:
            gone = {name: p.returncode for name, p in self.workers.items() if p.poll() is not None}
            if gone:
                raise AssertionError(f"course worker exited: {gone}\n{self.log_tails()}")
            return celery_app.worker_count(celery, 0.5) >= len(self.workers)

        wait_for(answering, timeout, "workers to answer")

    def stop(self) -> None:
        procs = [p for p in [*self.workers.values(), self.web] if p is not None]
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM if proc is not self.web else signal.SIGINT)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.workers.clear()
        self.web = None

    def log_tails(self, chars: int = 4000) -> str:
        return "".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}\n" for p in sorted(self.logs.glob("*.log"))
        )
