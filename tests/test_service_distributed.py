"""The distributed engine through the real commands: ``course serve --engine celery`` (the web app
and its dispatcher) and three ``course worker`` processes, with a real redis-server and PostgreSQL,
all started here on 127.0.0.1 and free ports. The workers grade through the real Celery task and the
sandboxed grader; a worker is killed mid-task, the broker restarted mid-batch, a poison submission
given up.

The cluster is shared by the tests of this module; each test checks only the submissions it made.
Most submissions are untouched notebooks: they still start a sandboxed kernel each, but run no
student code, which keeps the module's CI time down.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers import REPO, submission
from sqlalchemy import select, update

from grader import cli
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
from grader.service.models import Base, Job, Result, Submission, UploadBlob, utcnow
from grader.service.settings import BROKER_ENV, DATABASE_ENV
from grader.service.tasks import GAVE_UP
from grader.service.testing import free_port, login, make_user, wait_for

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
    lesson_hash: str  # lesson04's content then (others may edit the shared checkout during a run)


@pytest.fixture(scope="module")
def cluster(servers: tuple[Redis, Postgres]) -> Iterator[Grading]:
    redis_server, postgres = servers
    db_url = postgres.create_database("grading")
    folder = Path(tempfile.mkdtemp(prefix="course-dist-"))
    (folder / "logs").mkdir()
    # Pre-forked kernels (root mode) take two thirds of the CPU off each of the 300 submissions.
    c = Cluster(REPO, db_url, redis_server.url, folder / "logs", lease_s=LEASE_S, prefork=os.geteuid() == 0)
    commit, lesson_hash = distributed.course_commit(REPO), distributed.lesson_hash(COURSE, "lesson04")
    engine = None
    try:
        c.start_web(folder / "data")  # it migrates the database, so it starts first
        for name in ("w1", "w2", "w3"):
            c.start_worker(name, COURSE_TEST_POISON=POISON)
        c.wait_for_workers()
        engine = make_engine(db_url)
        yield Grading(c, redis_server, session_factory(engine), commit, lesson_hash)
    finally:
        c.stop()
        if engine is not None:
            engine.dispose()
        print(c.log_tails())  # pytest shows it when a test failed
        shutil.rmtree(folder, ignore_errors=True)


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


def _blocked_backends(engine: Any) -> int:
    """PostgreSQL backends now waiting for a row lock."""
    with engine.connect() as conn:
        query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        return int(conn.exec_driver_sql(query).scalar() or 0)


def test_resending_a_job_while_a_worker_claims_it_deadlocks_neither(servers):
    """The dispatcher takes back a job whose lease ran out just as a worker claims it. Both lock the
    job row and then the submission row; in the other order PostgreSQL aborted one of them, and an
    aborted claim spent the message, so the job waited 15 minutes (the killed-worker test's flake)."""
    _, postgres = servers
    engine = make_engine(postgres.create_database(f"lk{os.urandom(4).hex()}"))
    migrate(engine)
    factory = session_factory(engine)
    [sid] = submit_many(factory, [BLANK], "lk")
    with factory() as session:
        job_id = session.scalars(select(Job.id).where(Job.submission_id == sid)).one()
    assert distributed.claim_job(factory, job_id, "celery/gone/1/", lease_s=60).claimed
    with factory.begin() as session:  # the first worker vanished: its lease ran out
        session.execute(update(Job).where(Job.id == job_id).values(lease_until=utcnow() - timedelta(seconds=1)))
    claim = factory()
    # A second worker's claim, in claim_job's order, paused after its first statement:
    claim.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(state="running", worker="celery/w/2/", lease_until=utcnow() + timedelta(seconds=60))
    )
    errors: list[BaseException] = []

    def resend() -> None:
        try:
            distributed.mark_sent(factory, [job_id], resend_s=900)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=resend)
    thread.start()
    wait_for(lambda: _blocked_backends(engine) >= 1, 30, "the dispatcher to wait for the claimed job's row")
    claim.execute(update(Submission).where(Submission.id == sid).values(status="running"))
    claim.commit()  # with the dispatcher holding the submission row first, this was a deadlock
    claim.close()
    thread.join(30)
    assert errors == []
    with factory() as session:
        job, sub = session.get(Job, job_id), session.get(Submission, sid)
        assert job is not None and sub is not None
        assert (job.state, job.worker, sub.status) == ("running", "celery/w/2/", "running")
    engine.dispose()


def test_the_same_notebook_uploaded_twice_at_once_is_stored_once_and_both_are_accepted(servers):
    """At a deadline many students upload the untouched notebook at the same moment."""
    _, postgres = servers
    engine = make_engine(postgres.create_database(f"up{os.urandom(4).hex()}"))
    migrate(engine)
    factory = session_factory(engine)
    first = factory()
    digest = distributed.put_blob(first, BLANK)  # not committed yet
    done: list[str] = []
    thread = threading.Thread(target=lambda: done.append(distributed.DatabaseUploads(factory).put(BLANK)))
    thread.start()
    wait_for(lambda: _blocked_backends(engine) >= 1, 30, "the second upload to wait for the first")
    first.commit()
    first.close()
    thread.join(30)
    assert done == [digest]
    assert distributed.DatabaseUploads(factory).read(digest) == BLANK
    engine.dispose()


# --- bad settings: one line that names the setting, no traceback ---------------------------------


def test_bad_settings_give_one_line_that_names_the_setting(servers, tmp_path, capsys, monkeypatch):
    """`course worker` and `course serve --engine celery`, through the command's own entry point."""
    redis_server, postgres = servers
    for name in (DATABASE_ENV, BROKER_ENV):
        monkeypatch.delenv(name, raising=False)
    closed = f"127.0.0.1:{free_port()}"  # nothing listens there
    empty_db = postgres.create_database(f"e{os.urandom(4).hex()}")
    ready_db = postgres.create_database(f"r{os.urandom(4).hex()}")
    ready = make_engine(ready_db)
    migrate(ready)
    ready.dispose()
    data = ["--data", str(tmp_path / "data")]
    cases = [
        (
            ["worker", "--no-sandbox", "--db", f"postgresql+psycopg://course@{closed}/x", "--broker", redis_server.url],
            "--db: cannot reach the database",
        ),
        (
            ["worker", "--no-sandbox", "--db", ready_db, "--broker", f"redis://{closed}/0"],
            "--broker: cannot reach the broker",
        ),
        (
            ["worker", "--no-sandbox", "--db", empty_db, "--broker", redis_server.url],
            "--db: the database has no tables yet",
        ),
        (["worker", "--no-sandbox", "--broker", redis_server.url], "course worker needs --db"),
        (
            ["serve", "--engine", "celery", *data, "--db", "postgres-on-db1", "--broker", redis_server.url],
            "--db: not a database URL",
        ),
        (
            ["serve", "--engine", "celery", *data, "--db", ready_db, "--broker", "http://10.0.0.5:6379"],
            "--broker: 'http' is not a broker",
        ),
        (["serve", "--engine", "celery", *data, "--db", ready_db], "--engine celery needs --db"),
    ]
    for args, expected in cases:
        assert cli.main(["--root", str(REPO), *args]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"course: error: {expected}"), (args, err)


# --- the cluster ---------------------------------------------------------------------------------


def test_an_upload_through_the_web_app_is_graded_by_a_celery_worker(cluster):
    make_user(cluster.factory, "web-s1")
    make_user(cluster.factory, "web-t1", role="instructor")
    with httpx2.Client(base_url=cluster.cluster.base_url, timeout=30) as client:
        token = login(client, "web-s1")
        response = client.post(
            "/lessons/lesson04/submit",
            data={"csrf": token},
            files={"notebook": ("lesson04.ipynb", REFERENCE, "application/octet-stream")},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text
        sid = int(response.headers["location"].rsplit("/", 1)[1])

        def graded() -> dict[str, Any] | None:
            status = client.get(f"/api/submissions/{sid}/status").json()
            return status if status["status"] in ("graded", "failed") else None

        status = wait_for(graded, 90, "the uploaded notebook to be graded")
        assert (status["status"], status["total"], status["passed"]) == ("graded", 10.0, True)
        assert client.get(f"/submissions/{sid}/notebook").content == REFERENCE  # read back from the database
    [(job, _, results)] = outcome(cluster.factory, [sid]).values()
    assert (job.attempts, results[0]["graded_by"]["engine"]) == (1, "celery")
    assert results[0]["graded_by"]["worker"].split("/")[1] in {"w1", "w2", "w3"}
    with cluster.factory() as session:  # the bytes went to the database, in the submission's transaction
        assert session.get(UploadBlob, hashlib.sha256(REFERENCE).hexdigest()) is not None
    with httpx2.Client(base_url=cluster.cluster.base_url, timeout=30) as staff:
        login(staff, "web-t1")
        page = staff.get("/staff").text
        assert "评分进程</th><td>3</td>" in page and "评分延迟（中位数）" in page
        body = staff.get("/metrics").text
        assert "course_workers 3\n" in body and 'course_grading_latency_seconds{quantile="0.5"}' in body


def test_three_workers_grade_300_submissions_each_exactly_once(cluster):
    batch = [REFERENCE if i % 30 == 0 else BLANK for i in range(300)]
    ids = submit_many(cluster.factory, batch, "b")
    wait_graded(cluster, ids, 420, "300 submissions to be graded")
    graders = set()
    for sid, data in zip(ids, batch, strict=True):
        job, sub, results = outcome(cluster.factory, [sid])[sid]
        assert (job.state, job.attempts, sub.status, len(results)) == ("done", 1, "graded", 1), sid
        assert results[0]["total"] == (10.0 if data is REFERENCE else 0.0), sid
        stamp = results[0]["graded_by"]
        assert (stamp["commit"], stamp["lesson_hash"]) == (cluster.commit, cluster.lesson_hash)
        graders.add(stamp["worker"].split("/")[1])
    assert graders == {"w1", "w2", "w3"}
    snap = metrics.snapshot(cluster.factory, celery_app.worker_count(celery_app.make_app(cluster.redis.url)))
    assert snap.workers == 3 and snap.depth == 0 and snap.graded_last_hour >= 300
    assert snap.latency_p50_s is not None and snap.latency_p50_s > 0


def test_a_worker_killed_mid_task_has_its_task_graded_by_another(cluster):
    """Its lease runs out, the dispatcher sends the job again, another worker claims it. (This test
    once timed out: the resend and the new claim could deadlock; see the lock-order test above.)"""
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
    ids = submit_many(cluster.factory, [BLANK] * 24, "r")

    def some_done() -> bool:
        with cluster.factory() as session:
            return (
                len(session.scalars(select(Job.id).where(Job.submission_id.in_(ids), Job.state == "done")).all()) >= 6
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
