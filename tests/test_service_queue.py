"""The service's storage and queue without the web: leases, retries, one result per submission,
migrations that match the models, the upload store, backups, and the course settings it reads."""

from __future__ import annotations

import sqlite3
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from helpers import REPO, sample
from sqlalchemy import func, select, update

from grader.build import submit_link
from grader.course import load_service_settings
from grader.errors import SourceError
from grader.service import queue
from grader.service.backup import backup
from grader.service.db import make_engine, migrate, session_factory
from grader.service.models import Base, Job, Result, Submission, utcnow
from grader.service.settings import Settings
from grader.service.store import StoreFull, UploadStore
from grader.service.tasks import GAVE_UP, save_result
from grader.service.testing import make_user


@pytest.fixture
def factory(tmp_path: Path) -> Any:
    engine = make_engine(f"sqlite:///{tmp_path / 'course.db'}")
    migrate(engine)
    return session_factory(engine)


def add_submission(factory: Any) -> int:
    with factory() as session:
        n = session.scalar(select(func.count()).select_from(Submission))
    uid = make_user(factory, f"u{n}")
    with factory.begin() as session:
        sub = Submission(user_id=uid, lesson="lesson04", sha256="0" * 64, size=1)
        session.add(sub)
        session.flush()
        queue.enqueue(session, sub.id)
        return sub.id


def test_migrations_create_exactly_the_models(factory):
    with factory() as session:
        diff = compare_metadata(MigrationContext.configure(session.connection()), Base.metadata)
    assert diff == []


def test_migrate_twice_is_harmless(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    migrate(engine)
    migrate(engine)


def test_a_claimed_job_is_not_claimed_again_until_its_lease_runs_out(factory):
    sid = add_submission(factory)
    first = queue.claim(factory, "w/1/", lease_s=60)
    assert first is not None and first.submission_id == sid and first.attempts == 1
    assert queue.claim(factory, "w/2/", lease_s=60) is None
    with factory.begin() as session:  # the worker went silent and its lease ran out
        session.execute(update(Job).where(Job.id == first.job_id).values(lease_until=utcnow() - timedelta(hours=1)))
    again = queue.claim(factory, "w/2/", lease_s=60)
    assert again is not None and again.job_id == first.job_id and again.attempts == 2


def test_a_dead_workers_job_is_put_back_at_once(factory):
    add_submission(factory)
    job = queue.claim(factory, "embedded/12/", lease_s=600)
    assert job is not None
    assert queue.release_worker(factory, "embedded/1/") == 0  # a prefix of another worker's id
    assert queue.release_worker(factory, "embedded/12/") == 1
    with factory() as session:
        assert session.get(Submission, job.submission_id).status == "queued"
    assert queue.claim(factory, "embedded/13/", lease_s=600).attempts == 2


def test_a_job_that_keeps_killing_its_worker_is_given_up_with_a_message(factory, tmp_path):
    from grader.service.worker import step

    sid = add_submission(factory)
    for n in range(queue.MAX_ATTEMPTS):
        assert queue.claim(factory, f"w/{n}/", lease_s=600) is not None
        queue.release_worker(factory, f"w/{n}/")  # the worker died
    assert step(factory, UploadStore(tmp_path / "up"), grader=None, me="w/x/", lease_s=600)  # type: ignore[arg-type]
    with factory() as session:
        assert session.scalar(select(Job.state)) == "failed"
        assert session.get(Submission, sid).status == "failed"
        assert GAVE_UP in session.scalar(select(Result.data))


def test_a_job_run_twice_yields_one_result(factory):
    sid = add_submission(factory)
    result = {"total": 10.0, "graded": True}
    save_result(factory, sid, result)
    save_result(factory, sid, {**result, "total": 9.0})
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(Result)) == 1
        assert session.scalar(select(Result.total)) == 9.0


def test_a_result_and_the_end_of_its_job_commit_together(factory):
    sid = add_submission(factory)
    job = queue.claim(factory, "w/1/", lease_s=600)
    assert job is not None
    save_result(factory, sid, {"total": 10.0, "graded": True}, job.job_id)
    with factory() as session:
        row = session.execute(select(Submission.status, Job.state).join(Job, Job.submission_id == Submission.id))
        status, state = row.one()
    assert (status, state) == ("graded", "done")
    assert queue.claim(factory, "w/2/", lease_s=600) is None  # nothing left to run again


def test_a_full_queue_refuses(factory):
    add_submission(factory)
    with factory() as session, pytest.raises(queue.QueueFull):
        queue.enqueue(session, 1, max_queued=1)


def test_store_is_content_addressed_and_leaves_nothing_on_a_full_disk(tmp_path, monkeypatch):
    import errno

    store = UploadStore(tmp_path / "uploads")
    digest = store.put(b"abc")
    assert store.path(digest) == tmp_path / "uploads" / digest[:2] / f"{digest}.ipynb"
    assert store.read(digest) == b"abc" and store.put(b"abc") == digest

    def full(*_args: Any) -> int:
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    monkeypatch.setattr("grader.service.store.os.write", full)
    with pytest.raises(StoreFull):
        store.put(b"other bytes")
    assert sorted(p.name for p in (tmp_path / "uploads").rglob("*") if p.is_file()) == [f"{digest}.ipynb"]
    with pytest.raises(ValueError):
        store.path("../../etc/passwd")


def test_backup_copies_the_database_and_uploads(tmp_path):
    settings = Settings(data=tmp_path / "data", course_root=REPO)
    settings.data.mkdir()
    engine = make_engine(settings.db_url)
    migrate(engine)
    factory = session_factory(engine)
    digest = UploadStore(settings.uploads).put(sample("reference").read_bytes())
    add_submission(factory)
    target, copied = backup(settings, tmp_path / "backup")
    assert copied == 1 and (tmp_path / "backup/uploads" / digest[:2] / f"{digest}.ipynb").is_file()
    with sqlite3.connect(target) as conn:
        assert conn.execute("select count(*) from submissions").fetchone() == (1,)
        assert conn.execute("pragma integrity_check").fetchone() == ("ok",)
    with pytest.raises(Exception, match="inside the data folder"):
        backup(settings, settings.data / "b")


def write_config(root: Path, block: str) -> Path:
    (root / "_quarto.yml").write_text("course:\n  pass_mark: 8\n" + textwrap.indent(block, "  "), encoding="utf-8")
    return root


def test_service_settings_are_read_and_checked_with_their_line(tmp_path):
    root = write_config(
        tmp_path,
        "service_url: https://course.example.edu/\nattempts_per_day: 3\nlate_policy: {penalty_per_day: 1}\n"
        "deadlines:\n  lesson04: 2026-12-01T23:59:00+08:00\ngradebook: latest\n",
    )
    got = load_service_settings(root)
    assert (got.service_url, got.attempts_per_day, got.late_policy, got.late_penalty_per_day, got.gradebook) == (
        "https://course.example.edu/", 3, "penalty", 1.0, "latest",
    )  # fmt: skip
    assert got.deadlines["lesson04"].utcoffset().total_seconds() == 8 * 3600
    for block, line, words in (
        ("attempts_per_day: 0\n", 3, "attempts_per_day"),
        ("late_policy: sometimes\n", 3, "late_policy"),
        ("answers:\n  lesson04: hidden\ndeadlines:\n  lesson04: 2026-12-01\n", 6, "UTC offset"),
        ("service_url: 'javascript:alert(1)'\n", 3, r"http\(s\) URL"),
    ):
        with pytest.raises(SourceError, match=words) as err:
            load_service_settings(write_config(tmp_path, block))
        assert err.value.line == line, block


def test_lesson_pages_link_to_the_service_only_when_it_is_set():
    source = "---\ntitle: x\n---\n\n## 本课目标\n"
    assert submit_link(source, None, "lesson04") == source
    linked = submit_link(source, "https://course.example.edu/", "lesson04")
    assert "[提交作业](https://course.example.edu/lessons/lesson04)" in linked
    assert linked.startswith("---\ntitle: x\n---\n")


def test_a_writing_transaction_takes_the_write_lock_when_it_begins(factory, tmp_path):
    """Else a read-then-write transaction fails at once ("database is locked") when another process
    commits in between, whatever the busy timeout: uploads failed that way under load."""
    with factory() as session:
        session.scalar(select(func.count()).select_from(Submission))
        other = sqlite3.connect(tmp_path / "course.db", timeout=0)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
        other.close()
    reader = session_factory(make_engine(f"sqlite:///{tmp_path / 'course.db'}", immediate=False))
    with reader() as session:
        session.scalar(select(func.count()).select_from(Submission))
        other = sqlite3.connect(tmp_path / "course.db", timeout=0)
        other.execute("BEGIN IMMEDIATE")  # a reader holds no lock
        other.rollback()
        other.close()


def test_has_work_sees_only_claimable_jobs(factory):
    assert not queue.has_work(factory)
    add_submission(factory)
    assert queue.has_work(factory)
    queue.claim(factory, "w/1/", lease_s=600)
    assert not queue.has_work(factory)  # running under a live lease
