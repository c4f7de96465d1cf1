"""What the code item tells a student, and whom it blames: syntax and runtime errors in the exercise
cell, added cells that are not run, text from the kernel that cannot be printed, and hidden tests
that break because of the course rather than the student."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers import REPO, item, reference_code, submission

from grader.checks import COURSE_FAULT, WRONG_SHAPE, load_checks, reference_namespace
from grader.code_item import grade_code
from grader.course import load_course
from grader.errors import SourceError
from grader.grade import Grader
from grader.kernel import CellRun, KernelSession, StudentCallError, _parse_result
from grader.selfcheck import check_lesson

COURSE = load_course(REPO)
FAST = dataclasses.replace(COURSE, limits=dataclasses.replace(COURSE.limits, cell_timeout_s=3, submission_timeout_s=20))
REFERENCE = reference_code(COURSE)
MISSING = "找不到函数"


@pytest.fixture(scope="module")
def grader():
    g = Grader(FAST, sandbox=True)
    yield g
    g.close()


def code_item(grader, code: str, raw: bytes | None = None) -> dict:
    return item(grader.grade_bytes(raw or submission(COURSE, code=code), "feedback.ipynb"), "code")


def test_syntax_error_names_line_and_message_once(grader):
    code = REFERENCE + "\ndef broken(:\n    pass\n"
    line = code.strip("\n").splitlines().index("def broken(:") + 1
    got = code_item(grader, code)
    assert got["points"] == 0
    assert got["messages"][0].startswith(f"第 {line} 行有语法错误（SyntaxError）：invalid syntax。代码单元没有运行")
    assert not any(MISSING in m for m in got["messages"])
    assert sum("语法错误" in m for m in got["messages"]) == 1


def test_indentation_error_is_a_syntax_error_too(grader):
    got = code_item(grader, REFERENCE + "\nif True:\npass\n")
    assert got["points"] == 0 and "IndentationError" in got["messages"][0]
    assert not any(MISSING in m for m in got["messages"])


def test_timeout_in_the_cell_is_one_message_not_a_cascade(grader):
    got = code_item(grader, REFERENCE + "\nwhile True:\n    pass\n")
    assert got["points"] == 0 and "运行超时" in got["messages"][0]
    assert not any(MISSING in m for m in got["messages"])


def test_runtime_error_shows_type_message_and_line(grader):
    code = REFERENCE + "\nsettings = {}\nvalue = settings['bucket_cap']\n"
    line = code.strip("\n").splitlines().index("value = settings['bucket_cap']") + 1
    got = code_item(grader, code)
    assert f"运行代码时第 {line} 行抛出了 KeyError：'bucket_cap'" in got["messages"][0]
    assert got["points"] == 4  # the functions were defined before the error


def test_lone_surrogate_in_a_comment_still_scores_full_marks(grader):
    raw = submission(COURSE, code=REFERENCE + "\n# LONE_SURROGATE_HERE\n").replace(b"LONE_SURROGATE_HERE", b"\\ud83d")
    got = code_item(grader, "", raw)
    assert got["points"] == 4, got["messages"]


def test_extra_code_cells_are_not_run_and_the_student_is_told():
    lesson = COURSE.lessons["lesson04"]
    checks = load_checks(lesson, COURSE.solutions_dir("lesson04"), "checks.py")

    def session() -> KernelSession:
        s = KernelSession(FAST.limits)
        s.start()
        return s

    out = grade_code(lesson, checks, reference_namespace(lesson), {"ex-dp": REFERENCE}, [], "seed", session, 2)
    assert out.points == 4
    assert sum("2 个自己添加的代码单元" in m and "不会运行" in m for m in out.messages) == 1


def test_forged_error_reports_from_the_kernel_are_not_believed():
    cells = [CellRun("ex-dp", "ok", lines=20)]

    def reply(data: str) -> dict:
        return {"content": {"user_expressions": {"r": {"status": "ok", "data": {"text/plain": repr(data)}}}}}

    with pytest.raises(StudentCallError) as info:
        _parse_result(reply('{"error": "Leak_4096_128", "cell": 1, "line": 4096}'), "f", cells)
    assert (info.value.detail, info.value.line, info.value.cell) == ("Exception", None, "")
    with pytest.raises(StudentCallError) as info:
        _parse_result(reply('{"error": "ZeroDivisionError", "cell": 1, "line": 7}'), "f", cells)
    assert (info.value.detail, info.value.line, info.value.cell) == ("ZeroDivisionError", 7, "ex-dp")


# --- course faults -----------------------------------------------------------------------------
BROKEN_CHECK = '''

@check(points=0)
def broken_by_the_course(student):
    """gbs_tokens：出错的隐藏测试"""
    got = student.call("gbs_tokens", 1, 1, 1, 1)
    return close(got, undefined_expected_value)


@check(points=0)
def breaks_on_wrong_shape(student):
    """bucket_gradients：返回值可以拼接列表"""
    return student.call("bucket_gradients", [], 100) + [] == []
'''


@pytest.fixture
def broken_course(scratch_course: Path) -> Path:
    checks = scratch_course / "solutions/lesson04/checks.py"
    checks.write_text(checks.read_text(encoding="utf-8") + BROKEN_CHECK, encoding="utf-8")
    return scratch_course


def _line_of(path: Path, text: str) -> int:
    return path.read_text(encoding="utf-8").splitlines().index(text) + 1


def test_a_broken_check_is_the_course_fault_not_the_students(broken_course):
    course = dataclasses.replace(load_course(broken_course), limits=FAST.limits)
    line = _line_of(broken_course / "solutions/lesson04/checks.py", "    return close(got, undefined_expected_value)")
    g = Grader(course, sandbox=True)
    try:
        ref = g.grade_bytes(submission(course), "reference.ipynb")
        wrong_shape = REFERENCE.replace(
            "def bucket_gradients(grads, bucket_bytes):", "def bucket_gradients(grads, bucket_bytes):\n    return {}\n"
        )
        other = g.grade_bytes(submission(course, code=wrong_shape), "dict.ipynb")
        problems, _ = check_lesson(g, "lesson04")
    finally:
        g.close()
    messages = item(ref, "code")["messages"]
    assert f"✗ gbs_tokens：出错的隐藏测试：{COURSE_FAULT}" in messages
    assert "✓ bucket_gradients：返回值可以拼接列表" in messages
    [fault] = ref["course_faults"]
    assert "broken_by_the_course" in fault and "NameError" in fault
    assert f"solutions/lesson04/checks.py:{line}" in fault
    assert not any("undefined_expected_value" in m for m in messages)
    # The student's dict breaks the other check; the reference does not: the student's data is at fault.
    assert f"✗ bucket_gradients：返回值可以拼接列表：{WRONG_SHAPE}" in item(other, "code")["messages"]
    assert len(other["course_faults"]) == 1
    assert any("course fault" in p and f"checks.py:{line}" in p for p in problems), problems


@pytest.mark.parametrize(
    "text, line",
    [("def ok(:\n    pass\n", 4), ("import grader.no_such_module\n", 4), ("x = 1\nundefined_name\n", 5)],
)
def test_broken_checks_file_is_reported_at_its_line(scratch_course, text, line):
    path = scratch_course / "solutions/lesson04/checks.py"
    path.write_text('"""Doc."""\n\nfrom grader.checks import check\n' + text, encoding="utf-8")
    with pytest.raises(SourceError) as info:
        load_checks(COURSE.lessons["lesson04"], path.parent, "solutions/lesson04/checks.py")
    assert str(info.value).startswith(f"solutions/lesson04/checks.py:{line}: cannot import:"), str(info.value)


def test_course_grade_exits_2_when_a_hidden_check_breaks(broken_course, tmp_path):
    import subprocess
    import sys

    nb = tmp_path / "2026001" / "lesson04.ipynb"
    nb.parent.mkdir()
    nb.write_bytes(submission(load_course(broken_course)))
    report = tmp_path / "fb"
    proc = subprocess.run(
        [sys.executable, "-m", "grader.cli", "--root", str(broken_course), "grade", str(nb), "--report", str(report)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    line = _line_of(broken_course / "solutions/lesson04/checks.py", "    return close(got, undefined_expected_value)")
    assert proc.returncode == 2, proc.stderr
    assert "the course is at fault" in proc.stderr and f"solutions/lesson04/checks.py:{line}" in proc.stderr
    feedback = (report / "2026001.md").read_text(encoding="utf-8")
    assert "这不是你的问题" in feedback and "checks.py" not in feedback and "NameError" not in feedback
