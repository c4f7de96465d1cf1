"""Nothing accepted is lost: a worker killed mid-job, and the web process killed between storing an
upload and replying. These run the real service (worker processes, the sandbox) as subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from helpers import REPO, sample
from sqlalchemy import func, select

from grader.service import queue, testing
from grader.service.db import make_engine, migrate, session_factory
from grader.service.models import Job, Result, Submission
from grader.service.settings import Settings
from grader.service.store import UploadStore
from grader.service.testing import login, make_user, wait_for
from grader.service.worker import PAUSE_ENV, Supervisor

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's uid switch needs root here (as in CI)")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    engine = make_engine(f"sqlite:///{tmp_path / 'course.db'}")
    migrate(engine)
    make_user(session_factory(engine), "s1")
    return tmp_path


def db(data: Path) -> Any:
    return session_factory(make_engine(f"sqlite:///{data / 'course.db'}"))


def test_a_worker_killed_mid_job_is_restarted_and_the_submission_graded_once(data, monkeypatch):
    monkeypatch.setenv(PAUSE_ENV, "1.5")  # holds the job between claim and result, so the kill lands mid-job
    factory = db(data)
    settings = Settings(data=data, course_root=REPO, workers=1)
    digest = UploadStore(settings.uploads).put(sample("reference").read_bytes())
    with factory.begin() as session:
        sub = Submission(user_id=1, lesson="lesson04", sha256=digest, size=1)
        session.add(sub)
        session.flush()
        queue.enqueue(session, sub.id)
    supervisor = Supervisor(settings, 1, poll_s=0.2)
    supervisor.start()
    try:

        def running_worker() -> str | None:
            with factory() as session:
                job = session.scalars(select(Job)).one()
                return job.worker if job.state == "running" else None

        victim = wait_for(running_worker, 60, "a worker to claim the job")
        os.kill(int(victim.split("/")[1]), signal.SIGKILL)

        def graded() -> bool:
            with factory() as session:
                return session.get(Submission, sub.id).status == "graded"

        wait_for(graded, 120, "the submission to be graded after the restart")
        with factory() as session:
            job = session.scalars(select(Job)).one()
            assert (job.state, job.attempts) == ("done", 2) and job.worker != victim
            assert session.scalar(select(func.count()).select_from(Result)) == 1
            assert session.scalar(select(Result.total)) == 10
        assert supervisor.restarts == 1
    finally:
        supervisor.stop()


@contextmanager
def serving(data: Path, **env: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    with testing.serving(data, REPO, **env) as found:
        yield found


def crash_upload(base: str, proc: subprocess.Popen[bytes], data: bytes) -> None:
    with httpx2.Client(base_url=base, timeout=30) as client:
        token = login(client, "s1")
        with pytest.raises(httpx2.TransportError):
            client.post("/lessons/lesson04/submit", data={"csrf": token}, files={"notebook": ("a.ipynb", data)})
    assert proc.wait(30) == 70  # the test hook's os._exit, not an error of its own


def test_the_web_process_killed_between_storing_and_replying_leaves_all_or_nothing(data):
    factory = db(data)
    notebook = sample("reference").read_bytes()

    def count(model: Any) -> int:
        with factory() as session:
            return session.scalar(select(func.count()).select_from(model)) or 0

    with serving(data, COURSE_TEST_CRASH_AT="after-store") as (proc, base):
        crash_upload(base, proc, notebook)
    assert count(Submission) == 0 and count(Job) == 0  # stored file, no row: absent, never half

    with serving(data, COURSE_TEST_CRASH_AT="after-commit") as (proc, base):
        assert not list((data / "uploads").glob("*/.tmp-*"))
        crash_upload(base, proc, notebook)
    assert count(Submission) == 1 and count(Job) == 1  # committed before the reply: fully recorded
    with factory() as session:
        digest = session.scalars(select(Submission.sha256)).one()
    assert UploadStore(data / "uploads").read(digest) == notebook

    with serving(data) as (_proc, base):

        def graded() -> bool:
            with factory() as session:
                return session.scalars(select(Submission.status)).one() == "graded"

        wait_for(graded, 120, "the recorded upload to be graded after the restart")

        def metrics() -> str | None:  # the embedded engine's load, as Prometheus reads it
            body = httpx2.get(f"{base}/metrics", timeout=10).text
            return body if 'course_jobs{state="done"} 1\n' in body else None

        body = wait_for(metrics, 30, "/metrics to count the finished job")
        assert "course_workers 1\n" in body and "course_queue_depth 0\n" in body
    assert count(Result) == 1
