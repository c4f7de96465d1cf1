"""The service's commands besides ``serve``: roster import, user add, backup; and the demo data."""

from __future__ import annotations

import csv
from pathlib import Path

from helpers import REPO
from sqlalchemy import func, select

from grader.cli import main
from grader.service.db import make_engine, migrate, session_factory
from grader.service.demo import seed
from grader.service.models import Job, Submission, User
from grader.service.store import UploadStore


def users(data: Path) -> dict[str, User]:
    factory = session_factory(make_engine(f"sqlite:///{data / 'course.db'}"))
    with factory() as session:
        return {u.username: u for u in session.scalars(select(User))}


def test_roster_import_writes_one_time_codes_and_keeps_existing_accounts(tmp_path, capsys):
    data, codes = tmp_path / "data", tmp_path / "codes.csv"
    assert main(["--root", str(REPO), "roster", "import", str(REPO / "examples/roster.csv"), "--data", str(data),
                 "--codes", str(codes)]) == 0  # fmt: skip
    rows = list(csv.DictReader(codes.read_text(encoding="utf-8-sig").splitlines()))
    assert [r["username"] for r in rows] == ["2026001", "2026002", "2026003", "2026004", "2026005", "2026006"]
    assert len({r["code"] for r in rows}) == 6 and all(len(r["code"]) >= 16 for r in rows)
    stored = users(data)
    assert all(u.role == "student" and u.password_hash is None for u in stored.values())
    assert all(rows[0]["code"] not in (u.invite_hash or "") for u in stored.values())  # only a hash is kept
    assert main(["--root", str(REPO), "roster", "import", str(REPO / "examples/roster.csv"), "--data", str(data)]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[-1] == "username,name,role,code" and "6 already had an account" in out.err


def test_a_bad_roster_is_reported_at_its_line(tmp_path, capsys):
    roster = tmp_path / "roster.csv"
    roster.write_text("student,name\n2026001,张三\n2026001,李四\n", encoding="utf-8")
    assert main(["roster", "import", str(roster), "--data", str(tmp_path / "d")]) == 2
    assert f"{roster}:3: duplicate student id" in capsys.readouterr().err


def test_user_add_prints_an_invitation_code(tmp_path, capsys):
    data = tmp_path / "data"
    assert main(["user", "add", "prof", "--role", "instructor", "--name", "王老师", "--data", str(data)]) == 0
    assert "invitation code" in capsys.readouterr().out
    assert users(data)["prof"].role == "instructor"
    assert main(["user", "add", "prof", "--role", "ta", "--data", str(data)]) == 2
    assert "exists already" in capsys.readouterr().err


def test_backup_command(tmp_path, capsys):
    data = tmp_path / "data"
    main(["user", "add", "prof", "--role", "instructor", "--data", str(data)])
    assert main(["backup", str(tmp_path / "copy"), "--data", str(data)]) == 0
    assert "prof" in users(tmp_path / "copy")
    assert main(["backup", str(tmp_path / "x"), "--data", str(tmp_path / "nothing")]) == 2
    assert "no database here" in capsys.readouterr().err


def test_demo_seeds_a_roster_two_accounts_and_the_samples_once(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'course.db'}")
    migrate(engine)
    factory = session_factory(engine)
    store = UploadStore(tmp_path / "uploads")
    assert seed(factory, store, REPO)
    with factory() as session:
        accounts = {u.username: u for u in session.scalars(select(User))}
        assert accounts["teacher"].role == "instructor" and accounts["teacher"].password_hash
        assert accounts["2026001"].password_hash and not accounts["2026002"].password_hash
        assert session.scalar(select(func.count()).select_from(Submission)) == 6
        assert session.scalar(select(func.count()).select_from(Job).where(Job.state == "queued")) == 6
    assert not seed(factory, store, REPO)
