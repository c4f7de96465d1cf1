"""Grading a whole class from the command line, as an instructor does after an LMS bulk download.

Students all submit ``lesson04.ipynb``, so the student is read from the path; the gradebook, the
reports and the overrides are keyed by student id. The exit code tells a script what happened.
Hostile file names and file types must not corrupt the gradebook or the terminal, nor block the batch.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from helpers import REPO, reference_code, sample, submission

from grader.cli import main
from grader.course import load_course
from grader.notebook import build_notebook, dumps
from grader.report import _width

COURSE = load_course(REPO)
ROSTER = "student,name,email\n2026001,张三,zs@example.edu\n2026002,李四,\n2026003,王五,\n12345,赵六,\n"


def fast_notebook(**answers: str) -> bytes:
    """A lesson-4 notebook without its exercise cell: graded without a kernel, answers only."""

    def drop_code(nb: nbformat.NotebookNode) -> None:
        nb.cells = [c for c in nb.cells if c.metadata.get("course", {}).get("role") != "exercise"]

    return submission(COURSE, answers=answers or None, mutate=drop_code)


def with_answer(data: bytes, qid: str, text: str) -> dict:
    """A notebook as JSON data with one answer replaced (text that nbformat itself could not write)."""
    nb = json.loads(data)
    next(c for c in nb["cells"] if c.get("id") == qid)["source"] = text
    return nb


def put(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def run(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """The CLI in a child process, as a shell script would call it."""
    proc = subprocess.run(
        [sys.executable, "-m", "grader.cli", "--root", str(REPO), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    return proc.returncode, proc.stdout, proc.stderr


def read_csv(path: Path) -> list[dict[str, str]]:
    raw = path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf"), "the gradebook must start with a UTF-8 BOM"
    return list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"))))


@pytest.fixture
def roster(tmp_path: Path) -> Path:
    path = tmp_path / "roster.csv"
    path.write_text(ROSTER, encoding="utf-8")
    return path


def test_per_student_folders_give_one_row_per_student_and_overrides_hit_one_row(tmp_path, roster, capsys):
    lms = tmp_path / "lms"
    ref = sample("reference").read_bytes()
    put(lms / "2026001" / "lesson04.ipynb", ref)
    put(lms / "2026002" / "lesson04.ipynb", fast_notebook())
    put(lms / "2026003" / "lesson04.ipynb", fast_notebook())
    overrides = tmp_path / "o.yml"
    overrides.write_text("2026002:\n  items: {code: 3}\n  reason: 现场演示过代码\n", encoding="utf-8")
    book = tmp_path / "g.csv"
    files = sorted(str(p) for p in lms.glob("*/lesson04.ipynb"))
    code = main(["--root", str(REPO), "grade", *files, "--roster", str(roster), "--csv", str(book),
                 "--overrides", str(overrides), "--report", str(tmp_path / "fb")])  # fmt: skip
    assert code == 0
    rows = read_csv(book)
    assert [(r["student"], r["name"]) for r in rows] == [("2026001", "张三"), ("2026002", "李四"), ("2026003", "王五")]
    assert {"student", "name", "file", "sha256"} <= set(rows[0])
    assert all(len(r["sha256"]) == 64 for r in rows)
    assert rows[0]["total"] == "10" and rows[0]["passed"] == "yes"
    assert [r["overridden"] for r in rows] == ["no", "yes", "no"] and rows[1]["code"] == "3" and rows[2]["code"] == "0"
    assert sorted(p.name for p in (tmp_path / "fb").glob("*.md")) == ["2026001.md", "2026002.md", "2026003.md"]
    out = capsys.readouterr().out
    assert "张三" in out and "2026003" in out


def test_canvas_moodle_and_dash_names_identify_students(tmp_path, roster):
    data = fast_notebook()
    files = [
        put(tmp_path / "canvas" / "zhaoliu_12345_99887_lesson04.ipynb", data),
        put(tmp_path / "canvas" / "zhangsan_late_2026001_99888_lesson04-1.ipynb", data),
        put(tmp_path / "moodle" / "李四_778_assignsubmission_file_" / "lesson04.ipynb", data),
        put(tmp_path / "flat" / "2026003-lesson04.ipynb", data),
    ]
    book = tmp_path / "g.csv"
    code, _, err = run(tmp_path, "grade", *map(str, files), "--roster", str(roster), "--csv", str(book), "--no-sandbox")
    assert code == 0, err
    assert [(r["student"], r["name"]) for r in read_csv(book)] == [
        ("12345", "赵六"), ("2026001", "张三"), ("2026002", "李四"), ("2026003", "王五"),
    ]  # fmt: skip


def test_unknown_students_and_double_submissions_are_graded_and_flagged(tmp_path, roster):
    data = fast_notebook(q1="数据并行把数据分到各卡。")
    files = [
        put(tmp_path / "9999999" / "lesson04.ipynb", data),  # not on the roster
        put(tmp_path / "misc" / "homework.ipynb", data),  # no id in the path
        put(tmp_path / "2026001" / "lesson04.ipynb", data),
        put(tmp_path / "2026001" / "lesson04 (1).ipynb", fast_notebook()),
    ]
    book, reports = tmp_path / "g.csv", tmp_path / "fb"
    code, _, err = run(tmp_path, "grade", *map(str, files), "--roster", str(roster), "--csv", str(book),
                       "--report", str(reports), "--no-sandbox")  # fmt: skip
    assert code == 0, err
    rows = read_csv(book)
    assert len(rows) == 4 and all(r["errors"] == "" for r in rows)
    assert "not on the roster" in rows[0]["flags"] and "no student id in the path" in rows[1]["flags"]
    assert "2 submissions" in rows[2]["flags"] and "2 submissions" in rows[3]["flags"]
    assert "9999999" in err and "homework.ipynb" in err
    names = sorted(p.name for p in reports.glob("*.md"))
    assert len(names) == 4 and sum(n.startswith("2026001-") for n in names) == 2


# --- exit codes -------------------------------------------------------------------------------
def test_exit_1_for_files_that_cannot_be_graded_with_a_summary(tmp_path):
    good = put(tmp_path / "2026001" / "lesson04.ipynb", fast_notebook())
    folder = tmp_path / "2026002"
    folder.mkdir()
    code, _, err = run(tmp_path, "grade", str(good), str(tmp_path / "missing" / "lesson04.ipynb"), str(folder),
                       str(tmp_path / "lms/*/lesson04.ipynb"), "--no-sandbox")  # fmt: skip
    assert code == 1
    assert "3 of 4 submission(s) could not be graded" in err
    assert "missing" in err and "文件夹" in err


def test_exit_1_when_forced_lesson_does_not_match(tmp_path):
    nb = put(tmp_path / "2026001" / "lesson04.ipynb", fast_notebook())
    code, _, err = run(tmp_path, "grade", str(nb), "--lesson", "lesson05", "--no-sandbox")
    assert code == 1 and "could not be graded" in err


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--lesson", "lesson77"], "no lesson 'lesson77'"),
        (["--csv", "/nonexistent/dir/x.csv"], "/nonexistent/dir/x.csv: folder /nonexistent/dir does not exist"),
        (["--report", str(REPO / "README.md")], "is not a folder"),
        (["--jobs", "0"], "--jobs: must be from 1 to 64"),
        (["--jobs", "two"], "--jobs: must be a whole number"),
    ],
)
def test_exit_2_for_command_errors_before_grading(tmp_path, args, fragment):
    nb = put(tmp_path / "2026001" / "lesson04.ipynb", fast_notebook())
    code, out, err = run(tmp_path, "grade", str(nb), *args, "--no-sandbox")
    assert code == 2 and fragment in err and "Traceback" not in err
    assert out == ""  # nothing was graded


@pytest.mark.parametrize(
    "text, fragment, line",
    [
        (
            "2026001:\n  reason: ok\n2026OO2:\n  items: {q1: 1}\n  reason: typo\n",
            "'2026OO2': not a known student id",
            3,
        ),
        ("/home/t/lms/2026001/lesson04.ipynb:\n  items: {q1: 1}\n  reason: r\n", "not a known student id", 1),
        ("2026001:\n  lift_vetoes: [dp-cuts-memroy]\n  reason: r\n", "unknown veto id 'dp-cuts-memroy'", 1),
        (f"{'ab' * 32}:\n  items: {{q1: 1}}\n  reason: r\n", "no submission in this batch has this sha256", 1),
    ],
)
def test_exit_2_for_bad_overrides_with_file_and_line(tmp_path, roster, text, fragment, line):
    nb = put(tmp_path / "2026001" / "lesson04.ipynb", fast_notebook())
    overrides = tmp_path / "o.yml"
    overrides.write_text(text, encoding="utf-8")
    code, out, err = run(tmp_path, "grade", str(nb), "--roster", str(roster), "--overrides", str(overrides),
                         "--no-sandbox")  # fmt: skip
    assert code == 2 and f"{overrides}:{line}:" in err and fragment in err and out == ""


def scratch(tmp_path: Path) -> Path:
    root = tmp_path / "course"
    root.mkdir()
    for name in ("_quarto.yml", "index.qmd"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "lessons", root / "lessons", ignore=shutil.ignore_patterns("*.ipynb"))
    shutil.copytree(REPO / "solutions", root / "solutions", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_exit_2_for_a_broken_checks_py_or_a_missing_rubric(tmp_path):
    nb = put(tmp_path / "2026001" / "lesson04.ipynb", fast_notebook())
    root = scratch(tmp_path)
    checks = root / "solutions/lesson04/checks.py"
    checks.write_text(checks.read_text(encoding="utf-8") + "\ndef broken(:\n", encoding="utf-8")
    line = checks.read_text(encoding="utf-8").count("\n")
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "--root", str(root), "grade", str(nb), "--no-sandbox"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and f"solutions/lesson04/checks.py:{line}:" in proc.stderr
    shutil.copy(REPO / "solutions/lesson04/checks.py", checks)
    (root / "solutions/lesson04/rubric.yml").unlink()
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "--root", str(root), "grade", str(nb), "--no-sandbox"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "solutions/lesson04/rubric.yml" in proc.stderr and "missing" in proc.stderr


# --- the gradebook in a spreadsheet ----------------------------------------------------------
@pytest.mark.skipif(shutil.which("soffice") is None, reason="LibreOffice is installed by scripts/setup")
def test_chinese_names_survive_libreoffice(tmp_path, roster):
    nb = put(tmp_path / "2026001" / "lesson04.ipynb", fast_notebook())
    book = tmp_path / "g.csv"
    code, _, err = run(tmp_path, "grade", str(nb), "--roster", str(roster), "--csv", str(book), "--no-sandbox")
    assert code == 0, err
    profile = tmp_path / "lo-profile"
    proc = subprocess.run(
        # The import filter's charset 0 is the desktop's (UTF-8 here), as when a teacher opens the file;
        # headless LibreOffice does not sniff the BOM, which is there for Excel.
        ["soffice", f"-env:UserInstallation=file://{profile}", "--headless", "--infilter=CSV:44,34,0",
         "--convert-to", "xlsx",
         "--outdir", str(tmp_path / "xlsx"), str(book)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with zipfile.ZipFile(tmp_path / "xlsx" / "g.xlsx") as z:
        strings = z.read("xl/sharedStrings.xml").decode("utf-8")
    assert '<t xml:space="preserve">张三</t>' in strings and ">student<" in strings


# --- hostile names, file types and text -------------------------------------------------------
def test_hostile_names_and_types_cannot_corrupt_the_gradebook_or_block_the_batch(tmp_path, roster):
    ref = sample("reference").read_bytes()
    honest = put(tmp_path / "2026001" / "lesson04.ipynb", ref)
    formula = put(tmp_path / '=HYPERLINK("evil")+1.ipynb', fast_notebook())
    newline = put(tmp_path / "y" / "a\n2026009  lesson04  4  2  2  2  10/10  PASS.ipynb", fast_notebook())
    ansi = put(tmp_path / "z" / "\x1b[2J\x1b[31mred.ipynb", fast_notebook())
    nb = with_answer(fast_notebook(), "q1", "DP\ud83d 把数据分到各卡。\x1b[31m")
    nb["metadata"]["course"]["lesson"] = "lesson04\x1b[2J"
    meta_ansi = tmp_path / "w" / "meta.ipynb"
    meta_ansi.parent.mkdir()
    meta_ansi.write_text(json.dumps(nb, ensure_ascii=True), encoding="utf-8")
    lone = with_answer(fast_notebook(), "q2", "梯度\ud83d平均")
    surrogate = put(tmp_path / "2026003" / "lesson04.ipynb", json.dumps(lone, ensure_ascii=True).encode())
    link = tmp_path / "2026002" / "lesson04.ipynb"
    link.parent.mkdir()
    link.symlink_to(honest)
    pipe = tmp_path / "12345" / "lesson04.ipynb"
    pipe.parent.mkdir()
    os.mkfifo(pipe)
    files = [honest, formula, newline, ansi, meta_ansi, surrogate, link, pipe]
    book = tmp_path / "g.csv"
    relative = [str(f.relative_to(tmp_path)) for f in files]  # as a shell glob in the download folder gives them
    code, out, err = run(tmp_path, "grade", *relative, "--roster", str(roster), "--csv", str(book), "--json",
                         "--report", str(tmp_path / "fb"))  # fmt: skip
    assert code == 1, err  # the symlink and the pipe were refused
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert results[0]["total"] == 10 and results[0]["passed"]
    assert "符号链接" in results[6]["errors"][0] and "不是普通文件" in results[7]["errors"][0]
    assert results[4]["graded"] is False and "\x1b" not in results[4]["errors"][0]
    assert results[5]["graded"] and "\ud83d" not in json.dumps(results[5], ensure_ascii=False)
    assert "\x1b" not in out and "\x1b" not in err
    rows = read_csv(book)
    assert len(rows) == len(files)
    assert rows[1]["file"].startswith("'=") and not any(r["file"].startswith(("=", "+", "-", "@")) for r in rows)
    assert all("\n" not in v for r in rows for v in r.values())
    code, table, _ = run(tmp_path, "grade", str(newline), "--no-sandbox")
    assert len([line for line in table.splitlines() if "PASS" in line]) == 0


def test_table_aligns_chinese_names(tmp_path, roster, capsys):
    files = [put(tmp_path / sid / "lesson04.ipynb", fast_notebook()) for sid in ("2026001", "12345", "2026003")]
    assert main(["--root", str(REPO), "grade", *map(str, files), "--roster", str(roster), "--no-sandbox"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "lesson04" in line]
    starts = {_width(line[: line.index("lesson04")]) for line in lines}
    assert len(lines) == 3 and len(starts) == 1


def test_regrading_into_the_same_report_folder_leaves_nothing_stale(tmp_path):
    reports = tmp_path / "fb"
    reports.mkdir()
    (reports / "notes.txt").write_text("instructor's own file", encoding="utf-8")
    a = put(tmp_path / "2026001" / "lesson04.ipynb", fast_notebook())
    b = put(tmp_path / "2026002" / "lesson04.ipynb", fast_notebook())
    assert run(tmp_path, "grade", str(a), str(b), "--report", str(reports), "--no-sandbox")[0] == 0
    assert run(tmp_path, "grade", str(a), "--report", str(reports), "--no-sandbox")[0] == 0
    assert sorted(p.name for p in reports.iterdir() if not p.name.startswith(".")) == [
        "2026001.html", "2026001.md", "notes.txt",
    ]  # fmt: skip


def test_grade_help_documents_the_exit_codes():
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "grade", "--help"], capture_output=True, text=True)
    assert "0 every submission was graded" in proc.stdout and "2 the course or the command is at fault" in proc.stdout


def test_reference_notebook_of_every_lesson_is_identified_by_folder(tmp_path):
    files = []
    for slug, lesson in sorted(COURSE.lessons.items()):
        nb = build_notebook(lesson, reference=True)
        nb.cells = [c for c in nb.cells if c.metadata.get("course", {}).get("role") != "exercise"]
        files.append(put(tmp_path / f"s-{slug}" / f"{slug}.ipynb", dumps(nb).encode()))
    code, out, err = run(tmp_path, "grade", *map(str, files), "--json", "--no-sandbox")
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert code == 0, err
    assert [r["student"] for r in results] == [f"s-{slug}" for slug in sorted(COURSE.lessons)]
    assert all(r["total"] == 6 for r in results)


def test_one_batch_of_every_hostile_finding_still_gives_the_reference_full_marks(tmp_path):
    """The findings of the attack set, graded together with an honest reference in one CLI batch:
    the batch finishes, the reference keeps 10/10, the gradebook is written, the grader stays small."""
    from test_kernel_hostile import (
        _MEASURED_CLI,
        COMM_STATE,
        DISPLAY_SWAP,
        ERROR_FLOOD,
        PEAK_RSS_MB,
        RETAINED_RSS_MB,
        measured,
    )  # fmt: skip

    blank = COURSE.lessons["lesson04"].exercises[0].code
    reference = reference_code(COURSE)
    leak = (
        "def _leak(*args):\n    raise type('Leak_' + str(args)[:40], (KeyError,), {})('hidden=' + repr(args))\n"
        "def bucket_gradients(grads, bucket_bytes):\n    _leak(grads, bucket_bytes)\n"
    )
    lone_comment = submission(COURSE, code=reference + "\n# LONE\n").replace(b"LONE", b"\\ud83d")
    long_answer = "DP 把数据分到各卡上，每卡显存不变，" * 2500  # about 45 KB in q1
    files = {
        "2026001/lesson04.ipynb": sample("reference").read_bytes(),
        "2026002/lesson04.ipynb": submission(COURSE, code=blank + ERROR_FLOOD),
        "2026003/lesson04.ipynb": submission(COURSE, code=blank + DISPLAY_SWAP),
        "2026004/lesson04.ipynb": submission(COURSE, code=blank + COMM_STATE),
        "2026005/lesson04.ipynb": submission(COURSE, code=leak),
        "2026006/lesson04.ipynb": lone_comment,
        "2026007/lesson04.ipynb": json.dumps(with_answer(submission(COURSE), "q1", long_answer)).encode(),
        "2026008/lesson04.ipynb": json.dumps(with_answer(submission(COURSE), "q2", "梯度\ud83d")).encode(),
        '=HYPERLINK("x")+1.ipynb': fast_notebook(),
    }
    for name, data in files.items():
        put(tmp_path / name, data)
    (tmp_path / "2026009").mkdir()
    (tmp_path / "2026009" / "lesson04.ipynb").symlink_to(tmp_path / "2026001" / "lesson04.ipynb")
    (tmp_path / "2026010").mkdir()
    os.mkfifo(tmp_path / "2026010" / "lesson04.ipynb")
    names = [*files, "2026009/lesson04.ipynb", "2026010/lesson04.ipynb"]
    proc = subprocess.run(
        # One job, so that the peak measures what one grader holds, not how two floods overlap in time.
        [sys.executable, "-c", _MEASURED_CLI, "--root", str(REPO), "grade", *names, "--json", "--jobs", "1",
         "--csv", "g.csv"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]  # only the symlink and the pipe could not be graded
    retained_mb, peak_mb = measured(proc.stderr, "retained_rss"), measured(proc.stderr, "peak_rss")
    assert retained_mb < RETAINED_RSS_MB, f"the grader still holds {retained_mb} MB"
    assert peak_mb < PEAK_RSS_MB, f"the grader peaked at {peak_mb} MB"
    results = {r["file"]: r for r in map(json.loads, proc.stdout.splitlines()[: len(names)])}
    assert results["2026001/lesson04.ipynb"]["total"] == 10 and results["2026001/lesson04.ipynb"]["passed"]
    assert next(i for i in results["2026006/lesson04.ipynb"]["items"] if i["id"] == "code")["points"] == 4
    assert any("只评阅了前" in m for i in results["2026007/lesson04.ipynb"]["items"] for m in i["messages"])
    assert "Leak_" not in json.dumps(results["2026005/lesson04.ipynb"], ensure_ascii=False)
    assert [r["graded"] for r in results.values()] == [True] * len(files) + [False, False]
    assert len(read_csv(tmp_path / "g.csv")) == len(names)
