"""The course service through FastAPI's TestClient: who may see and do what, and uploads.

Grading here runs in-process with the sandbox off (the notebooks are the course's own samples);
tests/test_service_browser.py and tests/test_service_faults.py run the real service with the sandbox.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import REPO, sample
from sqlalchemy import delete, func, select

from grader.course import load_course
from grader.grade import Grader
from grader.report import CSV_COLUMNS
from grader.service import worker
from grader.service.deps import Service
from grader.service.models import AuditEntry, Job, LoginFailure, Override, RegradeRequest, Result, Submission, User
from grader.service.settings import Settings
from grader.service.testing import csrf_of, login, make_user
from grader.service.web import create_app

PASSWORD = "password-1"


@pytest.fixture(scope="module")
def course_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch copy of the course: releasing answers edits its _quarto.yml, never the repo's."""
    dest = tmp_path_factory.mktemp("course")
    for name in ("_quarto.yml", "_quarto-student.yml", "_quarto-answers.yml", "index.qmd"):
        shutil.copy(REPO / name, dest / name)
    shutil.copytree(REPO / "lessons", dest / "lessons", ignore=shutil.ignore_patterns("*.ipynb"))
    shutil.copytree(REPO / "solutions", dest / "solutions", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture(scope="module")
def app(course_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    settings = Settings(data=tmp_path_factory.mktemp("data"), course_root=course_root, login_limit=5, login_ip_limit=12)
    return create_app(settings)


@pytest.fixture(scope="module")
def svc(app: Any) -> Service:
    return app.state.service  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def users(svc: Service) -> dict[str, int]:
    return {
        name: make_user(svc.factory, name, role, PASSWORD)
        for name, role in (("s1", "student"), ("s2", "student"), ("ta", "ta"), ("prof", "instructor"))
    }


@pytest.fixture(scope="module")
def grader(svc: Service) -> Iterator[Grader]:
    g = Grader(svc.course, sandbox=False)
    yield g
    g.close()


def client_for(app: Any, username: str | None) -> tuple[TestClient, str]:
    client = TestClient(app, base_url="http://testserver")
    token = login(client, username, PASSWORD) if username else ""
    return client, token


def upload(client: TestClient, token: str, data: bytes, slug: str = "lesson04") -> Any:
    return client.post(
        f"/lessons/{slug}/submit",
        data={"csrf": token},
        files={"notebook": ("lesson04.ipynb", data, "application/octet-stream")},
        follow_redirects=False,
    )


def grade_all(svc: Service, grader: Grader) -> None:
    while worker.step(svc.factory, svc.store, grader, "test/", 120):
        pass


@pytest.fixture(scope="module")
def graded(app: Any, svc: Service, users: dict[str, int], grader: Grader) -> dict[str, int]:
    """s1 submits the reference and the vetoed sample through the web, and both are graded."""
    client, token = client_for(app, "s1")
    ids = {}
    for situation in ("reference", "vetoed-answer"):
        response = upload(client, token, sample(situation).read_bytes())
        assert response.status_code == 303, response.text
        ids[situation] = int(response.headers["location"].rsplit("/", 1)[1])
    grade_all(svc, grader)
    return ids


def fill(path: str, sub_id: int) -> str:
    return re.sub(r"\{[a-z_]+\}", lambda m: "lesson04" if m.group(0) == "{slug}" else str(sub_id), path)


def routes(app: Any) -> list[tuple[str, str]]:
    """Every (method, path) the app serves, from FastAPI's own route table (its OpenAPI view)."""
    found = [(method.upper(), path) for path, ops in app.openapi()["paths"].items() for method in ops]
    assert len(found) >= 20, "the route table looks empty"
    return found


PUBLIC = {("GET", "/login"), ("POST", "/login"), ("GET", "/lessons"), ("GET", "/")}


def test_anonymous_gets_no_content_but_login_lessons_and_static(app, graded):
    client = TestClient(app)
    for method, path in routes(app):
        if (method, path) in PUBLIC:
            continue
        response = client.request(method, fill(path, graded["reference"]), follow_redirects=False)
        if path.startswith("/api/"):
            assert response.status_code == 401, path
        else:
            assert response.status_code == 303 and response.headers["location"].startswith("/login"), (method, path)
    assert client.get("/lessons").status_code == 200
    assert client.get("/static/style.css").status_code == 200
    assert client.get("/", follow_redirects=False).headers["location"] == "/lessons"
    listing = client.get("/lessons").text
    assert "/lessons/lesson04" not in listing and "我的状态" not in listing


def test_every_route_naming_a_submission_is_404_for_another_student(app, graded):
    """Enumerates the app's routes, so a route added later cannot be forgotten."""
    client, token = client_for(app, "s2")
    named = [(m, p) for m, p in routes(app) if "{submission_id}" in p]
    assert {p for _, p in named} >= {
        "/submissions/{submission_id}",
        "/api/submissions/{submission_id}/status",
        "/submissions/{submission_id}/notebook",
        "/submissions/{submission_id}/regrade-request",
        "/staff/submissions/{submission_id}/override",
        "/staff/submissions/{submission_id}/regrade",
    }
    for method, path in named:
        data = {"csrf": token, "item": "q1", "comment": "x", "target": "q1", "points": "2", "reason": "x"}
        response = client.request(method, fill(path, graded["reference"]), data=data if method == "POST" else None)
        assert response.status_code == 404, (method, path, response.status_code)
        assert "bucket" not in response.text and "2026" not in response.text


def test_a_student_sees_only_their_own_work(app, graded):
    client, _ = client_for(app, "s2")
    assert "未提交" in client.get("/lessons").text
    page = client.get("/lessons/lesson04").text
    assert "还没有提交" in page and "/submissions/" not in page
    owner, _ = client_for(app, "s1")
    assert owner.get(f"/submissions/{graded['reference']}").status_code == 200
    assert owner.get(f"/api/submissions/{graded['reference']}/status").json()["total"] == 10


def test_roles(app, graded):
    sub = graded["reference"]
    staff_pages = [
        "/staff",
        "/staff/lessons/lesson04/gradebook",
        "/staff/lessons/lesson04/gradebook.csv",
        "/staff/review",
    ]
    instructor_pages = ["/staff/roster"]
    student, token = client_for(app, "s1")
    for path in staff_pages + instructor_pages:
        assert student.get(path).status_code == 404, path
    assert student.post("/staff/lessons/lesson04/answers", data={"csrf": token, "action": "release"}).status_code == 404
    ta, ta_token = client_for(app, "ta")
    for path in staff_pages:
        assert ta.get(path).status_code == 200, path
    assert ta.get(f"/submissions/{sub}").status_code == 200
    for path in instructor_pages:
        assert ta.get(path).status_code == 404, path
    for path in ("/staff/lessons/lesson04/answers", "/staff/lessons/lesson04/regrade", "/staff/users"):
        assert ta.post(path, data={"csrf": ta_token, "action": "release"}).status_code == 404, path
    prof, _ = client_for(app, "prof")
    for path in staff_pages + instructor_pages:
        assert prof.get(path).status_code == 200, path


def test_security_headers_on_every_response(app):
    client, _ = client_for(app, "s1")
    for path in ("/lessons", "/static/style.css", "/no-such-page", "/submissions/999999"):
        headers = client.get(path).headers
        assert "default-src 'self'" in headers["content-security-policy"], path
        assert "frame-ancestors 'none'" in headers["content-security-policy"], path
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["referrer-policy"], path


def test_session_cookie_is_httponly_and_samesite(app, users):
    client = TestClient(app)
    page = client.get("/login")
    response = client.post(
        "/login", data={"csrf": csrf_of(page.text), "username": "s1", "password": PASSWORD}, follow_redirects=False
    )
    cookie = next(v for k, v in response.headers.multi_items() if k == "set-cookie" and "course_session=" in v)
    assert "httponly" in cookie.lower() and "samesite=lax" in cookie.lower()


def test_every_post_needs_the_sessions_csrf_token(app, graded):
    client, _ = client_for(app, "s1")
    other_token = client_for(app, "s2")[1]
    for token in (None, "", other_token):
        data = {"item": "q1", "comment": "请复核"} | ({"csrf": token} if token is not None else {})
        response = client.post(f"/submissions/{graded['reference']}/regrade-request", data=data)
        assert response.status_code == 403
    assert client.post("/login", data={"username": "s1", "password": PASSWORD}).status_code == 403


def test_login_does_not_tell_unknown_users_from_wrong_passwords_and_is_rate_limited(app, svc, users):
    client = TestClient(app)
    token = csrf_of(client.get("/login").text)
    texts = []
    for username in ("nobody", "s2"):
        response = client.post("/login", data={"csrf": token, "username": username, "password": "wrong-pass"})
        assert response.status_code == 400
        texts.append(re.sub(r'value="[^"]*"', "", response.text))
    assert texts[0] == texts[1]
    for _ in range(4):
        client.post("/login", data={"csrf": token, "username": "s2", "password": "wrong-pass"})
    blocked = client.post("/login", data={"csrf": token, "username": "s2", "password": PASSWORD})
    assert blocked.status_code == 429 and "次数过多" in blocked.text
    for n in range(6):  # from one address, across user names: the address is blocked too
        client.post("/login", data={"csrf": token, "username": f"x{n}", "password": "wrong-pass"})
    assert client.post("/login", data={"csrf": token, "username": "s1", "password": PASSWORD}).status_code == 429
    with svc.factory.begin() as session:  # the window passes (the other tests log in from this address)
        session.execute(delete(LoginFailure))


def test_invitation_code_works_once_and_a_password_must_be_set_first(svc, app):
    from grader.service.accounts import add_user

    with svc.factory.begin() as session:
        code = add_user(session, "s9", "student", "新同学").code
    client = TestClient(app)
    response = client.post(
        "/login", data={"csrf": csrf_of(client.get("/login").text), "username": "s9", "password": code},
        follow_redirects=False,
    )  # fmt: skip
    assert response.headers["location"] == "/password"
    assert client.get("/lessons/lesson04", follow_redirects=False).headers["location"] == "/password"
    token = csrf_of(client.get("/password").text)
    short = client.post("/password", data={"csrf": token, "new": "short", "again": "short"})
    assert short.status_code == 400
    ok = client.post(
        "/password", data={"csrf": token, "new": "a-new-pass", "again": "a-new-pass"}, follow_redirects=False
    )
    assert ok.status_code == 303
    assert client.get("/lessons/lesson04").status_code == 200
    again = TestClient(app)
    reused = again.post("/login", data={"csrf": csrf_of(again.get("/login").text), "username": "s9", "password": code})
    assert reused.status_code == 400
    login(again, "s9", "a-new-pass")


def count(svc: Service, model: Any) -> int:
    with svc.factory() as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


def stored_files(svc: Service) -> list[Path]:
    return [p for p in svc.store.root.rglob("*") if p.is_file()]


def test_uploads_that_are_refused_leave_nothing_stored(app, svc, users, monkeypatch):
    client, token = client_for(app, "s2")
    before = (count(svc, Submission), count(svc, Job), len(stored_files(svc)))
    too_big = b"{" + b" " * (svc.course.limits.upload_bytes + 10) + b"}"
    response = upload(client, token, too_big)
    assert response.status_code == 413 and "上限" in response.text
    assert upload(client, token, b"not json").status_code == 400
    other = json.loads(sample("reference").read_text(encoding="utf-8"))
    other["metadata"]["course"]["lesson"] = "lesson03"
    wrong = upload(client, token, json.dumps(other).encode())
    assert wrong.status_code == 400 and "不是 lesson04" in wrong.text

    def full(*_args: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("grader.service.store.os.write", full)
    refused = upload(client, token, sample("untouched").read_bytes())
    assert refused.status_code == 507 and "存储空间已满" in refused.text
    monkeypatch.undo()
    assert (count(svc, Submission), count(svc, Job), len(stored_files(svc))) == before


def test_an_accepted_upload_is_stored_by_its_hash_and_queued(app, svc, users):
    client, token = client_for(app, "s2")
    data = sample("untouched").read_bytes()
    response = upload(client, token, data)
    assert response.status_code == 303
    sub_id = int(response.headers["location"].rsplit("/", 1)[1])
    with svc.factory() as session:
        sub = session.get(Submission, sub_id)
        assert sub is not None and sub.status == "queued"
        assert svc.store.read(sub.sha256) == data
        assert svc.store.path(sub.sha256).name == f"{sub.sha256}.ipynb"
        assert session.scalar(select(Job.state).where(Job.submission_id == sub_id)) == "queued"
    assert client.get(f"/submissions/{sub_id}").text.count('http-equiv="refresh"') == 1


def test_attempts_per_day_and_a_full_queue_are_refused(app, svc, users):
    client, token = client_for(app, "s2")
    limit = svc.course.service.attempts_per_day
    with svc.factory() as session:
        used = session.scalar(select(func.count()).select_from(Submission).where(Submission.user_id == users["s2"]))
    data = sample("untouched").read_bytes()
    for _ in range(limit - (used or 0)):
        assert upload(client, token, data).status_code == 303
    refused = upload(client, token, data)
    assert refused.status_code == 429 and "次数已用完" in refused.text
    prof, prof_token = client_for(app, "prof")
    object.__setattr__(svc.settings, "max_queued", 0)
    try:
        full = upload(prof, prof_token, data)
    finally:
        object.__setattr__(svc.settings, "max_queued", 2000)
    assert full.status_code == 503 and "队列已满" in full.text


def test_feedback_and_veto_explanation_reach_the_student(app, graded):
    client, _ = client_for(app, "s1")
    assert "总分 10 / 10" in client.get(f"/submissions/{graded['reference']}").text
    vetoed = client.get(f"/submissions/{graded['vetoed-answer']}").text
    assert "一票否决" in vetoed and "未通过" in vetoed


def test_student_text_is_escaped(app, svc, users, grader):
    from helpers import submission

    client, token = client_for(app, "s1")
    data = submission(svc.course, answers={"q1": "<script>alert(1)</script><img src=x onerror=alert(2)>"})
    response = upload(client, token, data)
    grade_all(svc, grader)
    page = client.get(response.headers["location"]).text
    assert "总分" in page and "<script>alert" not in page and "<img src=x" not in page
    sub_id = response.headers["location"].rsplit("/", 1)[1]
    comment = "<script>alert(3)</script>请复核"
    client.post(f"/submissions/{sub_id}/regrade-request", data={"csrf": token, "item": "q1", "comment": comment})
    for viewer in (client, client_for(app, "ta")[0]):
        seen = viewer.get(f"/submissions/{sub_id}").text
        assert "&lt;script&gt;alert(3)&lt;/script&gt;请复核" in seen and "<script>alert(3)" not in seen


def test_override_is_audited_and_shown_to_the_student(app, svc, graded, users):
    sub = graded["vetoed-answer"]
    prof, token = client_for(app, "prof")
    page = prof.get(f"/submissions/{sub}").text
    veto = re.search(r'value="(veto:[^"]+)"', page).group(1)
    assert (
        prof.post(f"/staff/submissions/{sub}/override", data={"csrf": token, "target": veto, "reason": ""}).status_code
        == 400
    )
    response = prof.post(
        f"/staff/submissions/{sub}/override", data={"csrf": token, "target": veto, "reason": "答疑时确认学生的意思正确"},
        follow_redirects=False,
    )  # fmt: skip
    assert response.status_code == 303
    with svc.factory() as session:
        row = session.scalars(select(Override).where(Override.submission_id == sub)).one()
        assert (row.actor_id, row.target, row.from_value, row.to_value) == (users["prof"], veto, "vetoed", "lifted")
        assert row.created_at is not None
    student, _ = client_for(app, "s1")
    seen = student.get(f"/submissions/{sub}").text
    assert "教师调整" in seen and "答疑时确认学生的意思正确" in seen and "，通过" in seen
    csv_text = prof.get("/staff/lessons/lesson04/gradebook.csv").content.decode("utf-8-sig")
    header, *rows = csv_text.splitlines()
    assert header.split(",") == CSV_COLUMNS
    assert any(r.startswith("s1,") for r in rows)


def test_gradebook_takes_the_best_attempt(app, graded):
    prof, _ = client_for(app, "prof")
    rows = prof.get("/staff/lessons/lesson04/gradebook.csv").content.decode("utf-8-sig").splitlines()
    s1 = next(r for r in rows if r.startswith("s1,"))
    assert ",10,yes," in s1


def test_regrade_request_reaches_the_review_queue_and_its_outcome_the_student(app, svc, graded):
    sub = graded["reference"]
    student, token = client_for(app, "s1")
    student.post(
        f"/submissions/{sub}/regrade-request", data={"csrf": token, "item": "q2", "comment": "我认为要点答到了"}
    )
    ta, ta_token = client_for(app, "ta")
    assert "我认为要点答到了" in ta.get("/staff/review").text
    with svc.factory() as session:
        rid = session.scalars(select(RegradeRequest.id).where(RegradeRequest.submission_id == sub)).one()
    ta.post(
        f"/staff/regrade-requests/{rid}", data={"csrf": ta_token, "state": "rejected", "response": "要点二没有提到"}
    )
    assert "已驳回：要点二没有提到" in student.get(f"/submissions/{sub}").text


def test_regrade_requeues_and_yields_one_result(app, svc, graded, grader):
    sub = graded["reference"]
    prof, token = client_for(app, "prof")
    assert (
        prof.post(f"/staff/submissions/{sub}/regrade", data={"csrf": token}, follow_redirects=False).status_code == 303
    )
    prof.post(f"/staff/submissions/{sub}/regrade", data={"csrf": token})  # a second click queues nothing more
    with svc.factory() as session:
        assert (
            session.scalar(select(func.count()).select_from(Job).where(Job.submission_id == sub, Job.state == "queued"))
            == 1
        )
    grade_all(svc, grader)
    with svc.factory() as session:
        assert session.scalar(select(func.count()).select_from(Result).where(Result.submission_id == sub)) == 1
        assert session.scalar(select(func.count()).select_from(AuditEntry).where(AuditEntry.action == "regrade")) == 2


def test_answer_release_uses_the_cli_code(app, svc, course_root):
    prof, token = client_for(app, "prof")
    prof.post("/staff/lessons/lesson04/answers", data={"csrf": token, "action": "release"})
    assert load_course(course_root).released("lesson04")
    prof.post("/staff/lessons/lesson04/answers", data={"csrf": token, "action": "hide"})
    assert not load_course(course_root).released("lesson04")


def test_roster_import_on_the_web_shows_codes_once(app, svc):
    prof, token = client_for(app, "prof")
    roster = "student,name\nr1,甲\nr2,乙\n".encode()
    page = prof.post("/staff/roster/import", data={"csrf": token}, files={"roster": ("roster.csv", roster, "text/csv")})
    assert page.status_code == 200 and page.text.count("<code>") == 2
    with svc.factory() as session:
        user = session.scalars(select(User).where(User.username == "r1")).one()
        assert user.role == "student" and user.password_hash is None and user.invite_hash
    bad = prof.post(
        "/staff/roster/import",
        data={"csrf": token},
        files={"roster": ("roster.csv", b"student,name\nr3\n", "text/csv")},
    )
    assert bad.status_code == 400 and "roster.csv:2:" in bad.text


def test_late_policies(app, svc, users):
    from dataclasses import replace
    from datetime import UTC, datetime, timedelta

    from grader.service.results import effective, late_days

    course = svc.course
    saved = course.service
    past = datetime.now(UTC) - timedelta(days=1, hours=1)
    try:
        course.service = replace(saved, late_policy="lock", deadlines={"lesson04": past})
        client, token = client_for(app, "s1")
        locked = upload(client, token, sample("reference").read_bytes())
        assert locked.status_code == 403 and "截止时间" in locked.text
        course.service = replace(saved, late_policy="penalty", late_penalty_per_day=1.5, deadlines={"lesson04": past})
        now = datetime.now(UTC).replace(tzinfo=None)
        assert late_days(course, "lesson04", now) == 2 and late_days(course, "lesson03", now) == 0
        raw = {"graded": True, "total": 10.0, "vetoes": [], "errors": [], "items": [], "overrides": []}
        late = effective(course, Submission(id=1, late_days=2), raw, [])
        assert late["total"] == 7.0 and late["passed"] is False and "迟交 2 天" in late["errors"][0]
    finally:
        course.service = saved


def test_scheduled_release_happens_when_due(svc, course_root, users):
    from datetime import timedelta

    from grader.service.models import ScheduledRelease, utcnow
    from grader.service.staff import run_due_releases

    with svc.factory.begin() as session:
        session.add(ScheduledRelease(lesson="lesson05", at=utcnow() + timedelta(days=1)))
        session.add(ScheduledRelease(lesson="lesson06", at=utcnow() - timedelta(minutes=1)))
    assert run_due_releases(svc.factory, svc.course) == ["lesson06"]
    assert load_course(course_root).released("lesson06") and not load_course(course_root).released("lesson05")


def test_a_streamed_body_is_cut_off_at_the_limit(app, svc, users):
    client, token = client_for(app, "s2")
    before = count(svc, Submission)

    def body():  # no Content-Length: the limit must hold while the body streams in
        yield b'--x\r\nContent-Disposition: form-data; name="notebook"; filename="a.ipynb"\r\n\r\n'
        for _ in range(40):
            yield b" " * 100_000

    response = client.post(
        "/lessons/lesson04/submit", content=body(), headers={"content-type": "multipart/form-data; boundary=x"}
    )
    assert response.status_code == 413 and "文件太大" in response.text
    assert count(svc, Submission) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs, which needs root (as in CI)")
def test_a_really_full_upload_folder_gives_a_clear_refusal_and_keeps_nothing(app, svc, users):
    """The upload folder on a tiny file system, filled up: the upload is refused with a message that
    says why (507), and neither a file nor a database row is left behind."""
    import subprocess

    make_user(svc.factory, "s-full-disk", "student", PASSWORD)  # a fresh student: no attempts used today
    client, token = client_for(app, "s-full-disk")
    root = svc.store.root
    before = (count(svc, Submission), count(svc, Job))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(root)], check=True)
    try:
        filler = root / "filler"
        with filler.open("wb") as f:
            try:
                f.write(b"\0" * 128 * 1024)
            except OSError:
                pass  # the file system is now full
        refused = upload(client, token, sample("untouched").read_bytes())
        assert refused.status_code == 507 and "存储空间已满" in refused.text
        assert [p.name for p in root.rglob("*") if p.is_file()] == ["filler"]
        assert (count(svc, Submission), count(svc, Job)) == before
    finally:
        subprocess.run(["umount", str(root)], check=True)
