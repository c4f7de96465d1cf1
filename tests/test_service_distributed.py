"""The distributed engine: Celery workers with a real redis-server and PostgreSQL, started here on
127.0.0.1 and free ports. Three worker processes grade through the real task and the sandboxed
grader; a worker is killed mid-task, the broker restarted mid-batch, a poison submission given up.

The cluster (broker, database, dispatcher, three workers) is shared by the tests of this module;
each test checks only the submissions it made.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers import REPO, submission
from sqlalchemy import select, update

from grader.course import load_course
from grader.notebook import build_notebook, dumps
from grader.service import celery_app, distributed, metrics, queue
from grader.service.db import make_engine, migrate, session_factory
from grader.service.localcluster import (
    Cluster,
    Postgres,
    Redis,
    add_students,
    find_pg_bindir,
    find_redis_server,
    local_servers,
)
from grader.service.models import Base, Job, Result, Submission, utcnow
from grader.service.tasks import GAVE_UP
from grader.service.testing import make_user, wait_for

LEASE_S = 8.0
POISON = "COURSE-TEST-POISON-7f3a"
COURSE = load_course(REPO)
BLANK = dumps(build_notebook(COURSE.lessons["lesson04"])).encode()
REFERENCE = submission(COURSE)
SLOW = submission(
    COURSE,
    code="import time\ntime.sleep(4)\n"
    + "\n".join(COURSE.lessons["lesson04"].solution_for(ex.id).code for ex in COURSE.lessons["lesson04"].exercises),
)
POISONED = submission(COURSE, code=f"# {POISON}\n")


def _need(found: str | None, what: str) -> str:
    """The path of a server binary; a missing one fails in CI (scripts/setup installs it) and skips elsewhere."""
    if found:
        return found
    message = f"{what} is not installed (scripts/setup installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Redis, Postgres]]:
    binary = _need(find_redis_server(), "redis-server")
    bindir = _need(str(find_pg_bindir() or "") or None, "postgresql")
    with local_servers(binary, Path(bindir)) as both:
        yield both


@dataclass
class Grading:
    cluster: Cluster
    redis: Redis
    factory: Any
    commit: str  # of the checkout when the workers started (the lead may commit during a run)


@pytest.fixture(scope="module")
def cluster(servers: tuple[Redis, Postgres]) -> Iterator[Grading]:
    redis_server, postgres = servers
    db_url = postgres.create_database("grading")
    engine = make_engine(db_url)
    migrate(engine)
    logs = Path(tempfile.mkdtemp(prefix="course-dist-logs-"))
    c = Cluster(REPO, db_url, redis_server.url, logs, lease_s=LEASE_S)
    commit = distributed.course_commit(REPO)
    c.start_dispatcher()
    for name in ("w1", "w2", "w3"):
        c.start_worker(name, COURSE_TEST_POISON=POISON)
    try:
        c.wait_for_workers()
        yield Grading(c, redis_server, session_factory(engine), commit)
    finally:
        c.stop()
        engine.dispose()
        print(c.log_tails())  # pytest shows it when a test failed
        shutil.rmtree(logs, ignore_errors=True)


def submit_many(factory: Any, batch: list[bytes], prefix: str) -> list[int]:
    """One student per notebook, each submitting it as the upload route does."""
    uids = add_students(factory, prefix, len(batch))
    return [distributed.submit(factory, uid, "lesson04", data) for uid, data in zip(uids, batch, strict=True)]


def finished(factory: Any, ids: list[int]) -> bool:
    with factory() as session:
        states = session.scalars(select(Job.state).where(Job.submission_id.in_(ids))).all()
    return len(states) == len(ids) and all(s in ("done", "failed") for s in states)


def wait_graded(grading: Grading, ids: list[int], timeout: float, what: str) -> None:
    """Wait until every job of ``ids`` is done or failed; on a timeout, show the jobs and the logs."""
    try:
        wait_for(lambda: finished(grading.factory, ids), timeout, what)
    except AssertionError as exc:
        with grading.factory() as session:
            jobs = session.execute(
                select(Job.submission_id, Job.state, Job.attempts, Job.worker, Job.lease_until).where(
                    Job.submission_id.in_(ids), Job.state.not_in(("done", "failed"))
                )
            ).all()
        raise AssertionError(f"{exc}\nunfinished: {jobs[:20]}\n{grading.cluster.log_tails()}") from None


def outcome(factory: Any, ids: list[int]) -> dict[int, tuple[Job, Submission, list[dict[str, Any]]]]:
    """Per submission: its job, its row and every result stored for it."""
    with factory() as session:
        out = {}
        for sid in ids:
            job = session.scalars(select(Job).where(Job.submission_id == sid)).one()
            results = [json.loads(r.data) for r in session.scalars(select(Result).where(Result.submission_id == sid))]
            out[sid] = (job, session.get(Submission, sid), results)
        return out


# --- storage on both databases -------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'course.db'}"
    else:
        _, postgres = request.getfixturevalue("servers")
        yield postgres.create_database(f"m{os.urandom(4).hex()}")


def test_the_migrations_build_exactly_the_models_on_sqlite_and_postgresql(any_db):
    engine = make_engine(any_db)
    migrate(engine)
    migrate(engine)  # a second run is a no-op
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    engine.dispose()


def test_an_upload_reaches_a_grading_host_through_the_database(any_db):
    engine = make_engine(any_db)
    migrate(engine)
    factory = session_factory(engine)
    uid = make_user(factory, "s1")
    first = distributed.submit(factory, uid, "lesson04", REFERENCE)
    second = distributed.submit(factory, uid, "lesson04", REFERENCE)  # the same bytes are stored once
    with factory() as session:
        rows = [session.get(Submission, sid) for sid in (first, second)]
        assert rows[0] is not None and rows[1] is not None
        digest = rows[0].sha256
        assert rows[1].sha256 == digest
        assert session.scalars(select(Job.state).where(Job.submission_id.in_([first, second]))).all() == ["queued"] * 2
    assert distributed.DatabaseUploads(factory).read(digest) == REFERENCE
    engine.dispose()


# --- routing by lesson content -------------------------------------------------------------------


def test_a_checkout_whose_checks_or_rubric_differ_listens_on_other_queues(scratch_course):
    here = distributed.course_queues(COURSE)
    (scratch_course / "solutions/lesson04/checks.py").write_text(
        (REPO / "solutions/lesson04/checks.py").read_text() + "\n# changed\n"
    )
    (scratch_course / "solutions/lesson05/rubric.yml").write_text(
        (REPO / "solutions/lesson05/rubric.yml").read_text() + "\n# changed\n"
    )
    there = distributed.course_queues(load_course(scratch_course))
    assert {slug for slug in here if here[slug] != there[slug]} == {"lesson04", "lesson05"}
    assert here["lesson04"].startswith("grade.lesson04.")


# --- the dispatcher (the job table's outbox), without a broker ------------------------------------


def test_the_dispatcher_sends_each_job_once_and_again_only_when_its_worker_vanished(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'course.db'}")
    migrate(engine)
    factory = session_factory(engine)
    ids = submit_many(factory, [BLANK, BLANK], "d")
    sent: list[tuple[int, str]] = []
    dispatcher = distributed.Dispatcher(factory, COURSE, lambda job, q: sent.append((job.submission_id, q)))
    assert dispatcher.tick() == 2 and dispatcher.tick() == 0
    assert sent == [(sid, distributed.course_queues(COURSE)["lesson04"]) for sid in ids]
    with factory() as session:
        first = session.scalars(select(Job.id).where(Job.submission_id == ids[0])).one()
    assert distributed.claim_job(factory, first, "celery/gone/1/", lease_s=60).claimed
    assert dispatcher.tick() == 0  # its worker holds a live lease
    with factory.begin() as session:  # ...that then runs out: the worker is gone
        session.execute(update(Job).where(Job.id == first).values(lease_until=utcnow() - timedelta(seconds=1)))
    assert dispatcher.tick() == 1 and dispatcher.tick() == 0  # sent again once, not on every tick
    assert distributed.claim_job(factory, first, "celery/other/2/", lease_s=60).attempts == 2


def test_a_broker_that_is_down_leaves_jobs_to_the_next_tick(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'course.db'}")
    migrate(engine)
    factory = session_factory(engine)
    submit_many(factory, [BLANK], "e")

    def down(job: distributed.Outgoing, q: str) -> None:
        raise ConnectionError("broker down")

    with pytest.raises(ConnectionError):
        distributed.Dispatcher(factory, COURSE, down).tick()
    assert distributed.Dispatcher(factory, COURSE, lambda job, q: None).tick() == 1


# --- the cluster ---------------------------------------------------------------------------------


def test_three_workers_grade_300_submissions_each_exactly_once(cluster):
    batch = [REFERENCE if i % 30 == 0 else BLANK for i in range(300)]
    ids = submit_many(cluster.factory, batch, "b")
    wait_graded(cluster, ids, 420, "300 submissions to be graded")
    expected_hash = distributed.lesson_hash(COURSE, "lesson04")
    graders = set()
    for sid, data in zip(ids, batch, strict=True):
        job, sub, results = outcome(cluster.factory, [sid])[sid]
        assert (job.state, job.attempts, sub.status, len(results)) == ("done", 1, "graded", 1), sid
        assert results[0]["total"] == (10.0 if data is REFERENCE else 0.0), sid
        stamp = results[0]["graded_by"]
        assert (stamp["commit"], stamp["lesson_hash"]) == (cluster.commit, expected_hash)
        graders.add(stamp["worker"].split("/")[1])
    assert graders == {"w1", "w2", "w3"}
    snap = metrics.snapshot(cluster.factory, celery_app.worker_count(celery_app.make_app(cluster.redis.url)))
    assert snap.workers == 3 and snap.depth == 0 and snap.graded_last_hour >= 300
    assert snap.latency_p50_s is not None and snap.latency_p50_s > 0


def test_a_worker_killed_mid_task_has_its_task_graded_by_another(cluster):
    [slow] = submit_many(cluster.factory, [SLOW], "k")

    def holder() -> str | None:
        with cluster.factory() as session:
            job = session.scalars(select(Job).where(Job.submission_id == slow)).one()
            return job.worker if job.state == "running" else None

    victim = wait_for(holder, 60, "the slow submission to be claimed").split("/")[1]
    cluster.cluster.kill_worker(victim)
    try:
        wait_graded(cluster, [slow], 120, "the killed worker's task to be graded")
        job, sub, results = outcome(cluster.factory, [slow])[slow]
        assert (job.state, job.attempts, sub.status, len(results)) == ("done", 2, "graded", 1)
        assert results[0]["total"] == 10.0
        assert results[0]["graded_by"]["worker"].split("/")[1] != victim
    finally:
        cluster.cluster.start_worker(victim, COURSE_TEST_POISON=POISON)
        cluster.cluster.wait_for_workers()


def test_a_broker_restarted_mid_batch_loses_nothing(cluster):
    ids = submit_many(cluster.factory, [BLANK] * 40, "r")

    def some_done() -> bool:
        with cluster.factory() as session:
            return (
                len(session.scalars(select(Job.id).where(Job.submission_id.in_(ids), Job.state == "done")).all()) >= 10
            )

    wait_for(some_done, 120, "a part of the batch to be graded")
    cluster.redis.stop()
    cluster.redis.start()
    wait_graded(cluster, ids, 180, "the batch to be graded after the restart")
    for job, sub, results in outcome(cluster.factory, ids).values():
        assert (job.state, sub.status, len(results), results[0]["total"]) == ("done", "graded", 1, 0.0)


def test_a_poison_submission_is_given_up_after_the_retry_limit_and_others_finish(cluster):
    ids = submit_many(cluster.factory, [POISONED, *[BLANK] * 10], "p")
    wait_graded(cluster, ids, 180, "the batch with a poison submission to finish")
    out = outcome(cluster.factory, ids)
    job, sub, results = out[ids[0]]
    assert (job.state, job.attempts, sub.status, len(results)) == ("failed", queue.MAX_ATTEMPTS + 1, "failed", 1)
    assert GAVE_UP in results[0]["errors"][0] and results[0]["graded"] is False
    for job, sub, results in (out[sid] for sid in ids[1:]):
        assert (job.state, job.attempts, sub.status, results[0]["total"]) == ("done", 1, "graded", 0.0)


def test_a_task_delivered_again_after_its_job_is_done_grades_nothing(cluster):
    [sid] = submit_many(cluster.factory, [BLANK], "t")
    wait_graded(cluster, [sid], 60, "the submission to be graded")
    with cluster.factory() as session:
        job_id = session.scalars(select(Job.id).where(Job.submission_id == sid)).one()
    config = celery_app.WorkerConfig(REPO, cluster.cluster.db_url, name=distributed.worker_name("here"))
    grader = distributed.StampedGrader(COURSE, distributed.Identity(config.name, config.commit))
    state = celery_app.WorkerState(cluster.factory, distributed.DatabaseUploads(cluster.factory), grader)
    try:
        assert celery_app.run_job(state, config, sid, job_id) == "finished"
    finally:
        grader.close()
    [(job, _, results)] = outcome(cluster.factory, [sid]).values()
    assert (job.attempts, len(results)) == (1, 1)


# --- metrics -------------------------------------------------------------------------------------


def test_metrics_count_the_queue_and_speak_the_prometheus_format(tmp_path, monkeypatch):
    engine = make_engine(f"sqlite:///{tmp_path / 'course.db'}")
    migrate(engine)
    factory = session_factory(engine)
    uid = make_user(factory, "s1")
    for _ in range(3):
        distributed.submit(factory, uid, "lesson04", BLANK)
    assert queue.claim(factory, "w/1/", 60) is not None
    snap = metrics.snapshot(factory, workers=2)
    assert (snap.jobs["queued"], snap.jobs["running"], snap.depth, snap.workers) == (2, 1, 3, 2)
    assert snap.latency_p50_s is None and ("评分进程", "2") in snap.rows()
    body = metrics.prometheus_text(snap)
    assert 'course_jobs{state="queued"} 2\n' in body and "course_queue_depth 3\n" in body
    assert "course_workers 2\n" in body and "# TYPE course_grading_latency_seconds summary" in body

    monkeypatch.setenv(metrics.TOKEN_ENV, "s3cret")
    app = FastAPI()
    metrics.install(app, factory, lambda: None)
    client = TestClient(app)
    assert client.get("/metrics").status_code == 401
    response = client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "course_queue_depth 3" in response.text and "course_workers" not in response.text
