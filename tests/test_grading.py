"""Grading as students and instructors rely on it: scores, messages, vetoes, reports, overrides."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys

import nbformat
import pytest
from helpers import REPO, item, lesson_rubric, reference_code, sample, submission

from grader.cli import main
from grader.course import load_course
from grader.errors import SourceError
from grader.grade import Grader
from grader.overrides import apply_override, load_overrides
from grader.report import feedback_html


@pytest.fixture(scope="module")
def course():
    return load_course(REPO)


@pytest.fixture(scope="module")
def grader(course):
    g = Grader(course, sandbox=True)
    yield g
    g.close()


def test_reference_scores_full_marks(grader):
    result = grader.grade_file(sample("reference"))
    assert result["lesson"] == "lesson04" and result["max"] == 10
    assert result["total"] == 10 and result["passed"] is True and result["vetoes"] == []
    assert [i["id"] for i in result["items"]] == ["code", "q1", "q2", "q3"]


def test_untouched_notebook_scores_zero_on_code(grader):
    result = grader.grade_file(sample("untouched"))
    code = item(result, "code")
    assert code["points"] == 0 and not result["passed"]
    assert any("______" in m for m in code["messages"])


def test_vetoed_sample_fails_with_evidence(grader):
    result = grader.grade_file(sample("vetoed-answer"))
    assert result["total"] >= 8 and result["passed"] is False
    veto = result["vetoes"][0]
    assert veto["id"] == "dp-cuts-memory" and veto["question"] == "q3"
    assert "每卡只存 1/8 的模型" in veto["evidence"] and veto["message"]


def test_wrong_function_gets_partial_code_credit(grader):
    code = item(grader.grade_file(sample("wrong-function")), "code")
    assert 0 < code["points"] < 4
    failed = [c for c in code["checks"] if not c["passed"]]
    assert failed and all(c["description"].startswith("bucket_gradients") for c in failed)


def test_syntax_error_scores_zero_on_code_with_message(grader):
    result = grader.grade_file(sample("syntax-error"))
    assert item(result, "code")["points"] == 0
    assert any("SyntaxError" in m for m in item(result, "code")["messages"])
    assert item(result, "q1")["points"] == 2


def test_partial_answers(grader):
    result = grader.grade_file(sample("partial-answers"))
    assert item(result, "q3")["points"] == 0 and "没有作答。" in item(result, "q3")["messages"]
    assert 0 < item(result, "q2")["points"] < 2


def test_same_notebook_same_result(grader):
    first = grader.grade_file(sample("wrong-function"))
    second = grader.grade_file(sample("wrong-function"))
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def test_failure_messages_reveal_no_hidden_inputs(course, grader):
    # A solution that is wrong only on hidden, randomly drawn inputs, and that prints its inputs.
    code = reference_code(course).replace(
        "    return int(mbs * grad_acc * dp * seq)",
        "    print('INPUTS', mbs, grad_acc, dp, seq)\n    raise ValueError(f'{mbs},{grad_acc},{dp},{seq}')",
    )
    result = grader.grade_bytes(submission(course, code=code), "leaky.ipynb")
    text = json.dumps(result, ensure_ascii=False)
    assert "INPUTS" not in text and "ValueError" in text
    assert not re.search(r"\d+,\d+,\d+,\d+", text)
    assert "def " not in text and "ref." not in text


def test_cell_structure_problems_are_reported_per_item(course, grader):
    def drop_q2(nb):
        nb.cells = [c for c in nb.cells if c.id != "q2"]

    def duplicate_exercise(nb):
        ex = next(c for c in nb.cells if c.id == "ex-dp")
        twin = nbformat.from_dict(json.loads(json.dumps(ex)))
        twin.id = "copy-1"
        twin.source = "def gbs_tokens(*a):\n    return 0\n"
        nb.cells.append(twin)

    def move_exercise(nb):
        ex = next(c for c in nb.cells if c.id == "ex-dp")
        nb.cells.remove(ex)
        nb.cells.append(ex)

    r = grader.grade_bytes(submission(course, mutate=drop_q2), "missing.ipynb")
    assert item(r, "q2")["points"] == 0 and any("找不到单元「q2」" in m for m in item(r, "q2")["messages"])
    assert item(r, "code")["points"] == 4 and r["total"] == 8

    r = grader.grade_bytes(submission(course, mutate=duplicate_exercise), "dup.ipynb")
    assert item(r, "code")["points"] == 4  # the original cell (by cell id) is graded, the copy is not
    assert any("被复制过" in m for m in item(r, "code")["messages"])

    r = grader.grade_bytes(submission(course, mutate=move_exercise), "moved.ipynb")
    assert item(r, "code")["points"] == 4 and any("顺序被移动" in m for m in item(r, "code")["messages"])


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"this is not json", "不是有效的 notebook"),
        (b'{"cells": [], "nbformat": 3}', "不是 nbformat 4"),
        (
            json.dumps(
                {"cells": [], "metadata": {"course": {"lesson": "lesson99"}}, "nbformat": 4, "nbformat_minor": 5}
            ).encode(),
            "没有可识别的课次",
        ),
        (json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode(), "没有可识别的课次"),
    ],
)
def test_unreadable_files_get_a_clear_error(grader, data, fragment):
    r = grader.grade_bytes(data, "bad.ipynb")
    assert r["total"] == 0 and r["passed"] is False and fragment in r["errors"][0] and "bad.ipynb" in r["errors"][0]


def test_notebook_for_another_lesson_when_lesson_is_given(course, grader):
    nb = json.loads(submission(course))
    nb["metadata"]["course"]["lesson"] = "lesson03"
    r = grader.grade_bytes(json.dumps(nb).encode(), "other.ipynb", expect_lesson="lesson04")
    assert r["total"] == 0 and "lesson03 的 notebook" in r["errors"][0]


def test_oversized_file_is_refused(course, grader, tmp_path):
    big = tmp_path / "big.ipynb"
    big.write_bytes(b" " * (course.limits.upload_bytes + 1))
    r = grader.grade_file(big)
    assert r["total"] == 0 and "超过上限" in r["errors"][0]


def test_keypoints_of_every_lesson_score_full_marks(course):
    from grader.rubric import score_answer

    for slug, lesson in course.lessons.items():
        rubric = lesson_rubric(course, slug)
        for q in ("q1", "q2", "q3"):
            res = score_answer(rubric, q, "\n".join(lesson.keypoints(q)))
            assert res.points == 2, (slug, q, [k.id for k in res.missing])
            assert res.vetoes == [], (slug, q, [v.id for v, _ in res.vetoes])


def test_overrides_change_points_and_lift_vetoes(course, grader, tmp_path):
    result = grader.grade_file(sample("vetoed-answer"))
    path = tmp_path / "overrides.yml"
    path.write_text(
        "2026005:\n  items: {q3: 2}\n  lift_vetoes: [dp-cuts-memory]\n  reason: 学生在答疑中澄清了表述\n",
        encoding="utf-8",
    )
    entry = load_overrides(path)["2026005"]
    apply_override(result, entry, course.pass_mark)
    assert result["vetoes"] == [] and result["passed"] is True and item(result, "q3")["points"] == 2
    assert {o["target"] for o in result["overrides"]} == {"q3", "veto:dp-cuts-memory"}
    assert all(o["reason"] == "学生在答疑中澄清了表述" for o in result["overrides"])


@pytest.mark.parametrize(
    "text, fragment, line",
    [
        ("s1:\n  items: {q3: 2}\n", "needs a non-empty 'reason'", 1),
        ("s0:\n  reason: ok\ns1:\n  items:\n    q1: 1\n    q4: 2\n  reason: r\n", "unknown item 'q4'", 6),
        ("s1:\n  items: {q1: 5}\n  reason: r\n", "from 0 to 2", 2),
        ("s1:\n  reason: r\n  lift: [x]\n", "unknown key(s) ['lift']", 1),
        ("s1: [\n", "invalid YAML", None),
    ],
)
def test_bad_overrides_file_is_reported(tmp_path, text, fragment, line):
    path = tmp_path / "o.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SourceError) as info:
        load_overrides(path)
    assert fragment in str(info.value) and info.value.path == str(path)
    if line is not None:
        assert info.value.line == line


def test_cli_batch_json_csv_and_reports(tmp_path, capsys):
    files = [str(sample(n)) for n in ("reference", "vetoed-answer")]
    bad = tmp_path / "garbage.ipynb"
    bad.write_text("{not json", encoding="utf-8")
    files.append(str(bad))
    code = main(
        [
            "--root",
            str(REPO),
            "grade",
            *files,
            "--json",
            "--jobs",
            "2",
            "--csv",
            str(tmp_path / "book.csv"),
            "--report",
            str(tmp_path / "rep"),
        ]
    )
    assert code == 1  # garbage.ipynb could not be graded
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["total"] for r in lines] == [10, lines[1]["total"], 0] and lines[2]["errors"]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "book.csv").read_text(encoding="utf-8-sig"))))
    assert [r["passed"] for r in rows] == ["yes", "no", "no"] and rows[1]["vetoes"] == "dp-cuts-memory"
    assert {"code", "q1", "q2", "q3", "total", "vetoes"} <= set(rows[0])
    assert len(list((tmp_path / "rep").glob("*.html"))) == 3 and len(list((tmp_path / "rep").glob("*.md"))) == 3


def test_html_report_escapes_student_text(course, grader):
    answers = {"q1": "<script>alert(1)</script> 梯度同步必须在 optimizer.step() 之前完成。<img src=x onerror=alert(2)>"}
    result = grader.grade_bytes(submission(course, answers=answers), "<script>alert(3)</script>.ipynb")
    html = feedback_html(result)
    assert "<script>" not in html and "<img" not in html and "&lt;script&gt;" in html


def test_rubric_cli(tmp_path):
    path = tmp_path / "answers.jsonl"
    path.write_text(
        '{"question": "q3", "text": "dp=8 时每卡只存 1/8 的参数。"}\n{"question": "q2", "text": "8 倍"}\n',
        encoding="utf-8",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "grader.cli", "--root", str(REPO), "rubric", "lesson04", "--input", str(path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    first, second = (json.loads(line) for line in proc.stdout.splitlines())
    assert (
        set(first) == {"points", "max", "key_points", "missing", "vetoes", "suppressed", "notes"} and first["max"] == 2
    )
    assert first["vetoes"][0]["id"] == "dp-cuts-memory" and "1/8" in first["vetoes"][0]["evidence"]
    assert second["key_points"][0]["id"] == "eight-times" and second["points"] == 0.5


def test_rubric_cli_names_the_malformed_line(tmp_path):
    path = tmp_path / "answers.jsonl"
    path.write_text(
        '{"question": "q1", "text": "ok"}\n{"question": "q1", text}\n{"question": "q9", "text": "x"}\n',
        encoding="utf-8",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "grader.cli", "--root", str(REPO), "rubric", "lesson04", "--input", str(path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and len(proc.stdout.splitlines()) == 1
    assert f"{path}:2:" in proc.stderr and f"{path}:3:" in proc.stderr and "Traceback" not in proc.stderr


def test_missed_key_points_show_hints_until_release_then_the_key_points(course):
    import dataclasses

    kit_rubric = Grader(course, sandbox=True).kit("lesson04").rubric
    data = submission(course, answers={"q1": "", "q2": "梯度累积和每次同步的结果一样。", "q3": ""})
    hidden = Grader(dataclasses.replace(course, releases={"lesson04": "hidden"}), sandbox=True)
    shown = Grader(dataclasses.replace(course, releases={"lesson04": "released"}), sandbox=True)
    try:
        before, after = hidden.grade_bytes(data, "a.ipynb"), shown.grade_bytes(data, "a.ipynb")
    finally:
        hidden.close()
        shown.close()
    text_before = " ".join(m for i in before["items"] for m in i["messages"])
    text_after = " ".join(m for i in after["items"] for m in i["messages"])
    for qid in ("q1", "q2", "q3"):
        for kp in kit_rubric.key_points[qid]:
            assert kp.says not in text_before and kp.says in text_after
            if kp.id in item(before, qid)["missing"]:
                assert kp.hint in text_before
    assert item(before, "q1")["missing"] and "没有作答" in " ".join(item(before, "q1")["messages"])


def test_copying_the_question_or_listing_keywords_earns_at_most_half_a_point(course, grader):
    lesson = course.lessons["lesson04"]
    copied = lesson.question_text("q1").replace("？", "。").replace("?", "。")
    salad = "梯度 all-reduce bucket 反向 重叠 step 同步 平均 TP 激活 关键路径"
    result = grader.grade_bytes(submission(course, answers={"q1": copied, "q2": salad}), "gaming.ipynb")
    assert item(result, "q1")["points"] <= 0.5 and item(result, "q2")["points"] <= 0.5
