"""The 4-point code item: run the student's exercise cells, run the hidden checks, explain the outcome.

The outcome separates what the student may read (``messages``) from what only instructors may read
(``course_faults``: tracebacks of hidden checks that broke, which are the course's fault).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .checks import CheckResult, run_checks
from .kernel import CellRun, KernelSession, RunReport
from .lesson import Lesson


@dataclass
class CodeOutcome:
    points: float
    messages: list[str]  # for the student, in Chinese
    checks: list[CheckResult]
    report: RunReport
    course_faults: list[str] = field(default_factory=list)  # for instructors only: never shown to students


def grade_code(
    lesson: Lesson,
    checks: list[Any],
    ref: Any,
    code: dict[str, str | None],
    notes: list[str],
    seed: str,
    new_session: Callable[[], KernelSession],
    extra_code_cells: int = 0,
) -> CodeOutcome:
    """Run the exercise cells in a fresh sandboxed kernel, then every hidden check against it.

    Only the exercise cells (found by id) are run; code cells the student added are not, and the
    student is told so once. When an exercise cell did not run to its end (syntax error, timeout,
    dead kernel) one message says why, instead of one misleading message per check."""
    messages = list(notes)
    if extra_code_cells:
        messages.append(EXTRA_CELLS.format(n=extra_code_cells))
    report = RunReport()
    results: list[CheckResult] = []
    runnable = [(ex.id, code.get(ex.id)) for ex in lesson.exercises]
    if any(src is None for _, src in runnable):
        messages.append("缺少代码单元，代码部分无法评分。")
    else:
        session = new_session()
        try:
            session.run_cells([(cid, src or "") for cid, src in runnable], report)
            stopped = _stopped_cell(report)
            if stopped is None:
                results = run_checks(checks, session, ref, seed)
            else:
                results = [CheckResult(c.name, c.description, 0.0, c.points, False, NOT_RUN) for c in checks]
        except Exception as exc:  # noqa: BLE001 - e.g. the sandbox could not start
            messages.append(f"无法在沙箱中运行你的代码（{type(exc).__name__}），代码部分记 0 分；请联系助教。")
        finally:
            session.close()
            if session.memory_exceeded:
                messages.append(MEMORY_EXCEEDED)
    messages += _run_messages(report)
    for c in results:
        messages.append(("✓ " if c.passed else "✗ ") + c.description + ("" if c.passed else f"：{c.reason}"))
    faults = [c.fault for c in results if c.fault]
    return CodeOutcome(round(sum(c.points for c in results), 2), messages, results, report, faults)


EXTRA_CELLS = (
    "你的提交中有 {n} 个自己添加的代码单元。评分只运行题目给出的代码单元（按 id 识别），"
    "这些新增单元不会运行：请把需要的辅助函数写进题目的代码单元里。"
)
NOT_RUN = "代码单元没有完整运行，无法测试"
MEMORY_EXCEEDED = "你的代码占用的内存超过了上限，内核已被终止。"
SKIPPED = "，所以隐藏测试无法进行，代码部分记 0 分。"


def _stopped_cell(report: RunReport) -> CellRun | None:
    """The exercise cell that kept the code from being defined at all, if any.

    A syntax error means nothing in the cell ran; a timeout or a dead kernel means nothing can be
    called any more. A runtime error is different: the functions defined before it still exist."""
    for cell in report.cells:
        if cell.status in ("timeout", "dead") or (cell.status == "error" and cell.error_name in SYNTAX_ERRORS):
            return cell
    return None


SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")


def _where(cell: CellRun, several: bool) -> str:
    line = f"第 {cell.error_line} 行" if cell.error_line is not None else ""
    return (f"代码单元「{cell.id}」" + line) if several else (line or f"代码单元「{cell.id}」")


def _run_messages(report: RunReport) -> list[str]:
    """What happened while the exercise cells ran, in the student's terms."""
    out = []
    several = len(report.cells) > 1
    for cell in report.cells:
        where = _where(cell, several)
        if cell.status == "error" and cell.error_name in SYNTAX_ERRORS:
            out.append(f"{where}有语法错误（{cell.error_name}）：{cell.error_message}。代码单元没有运行{SKIPPED}")
        elif cell.status == "error":
            detail = f"：{cell.error_message}" if cell.error_message else ""
            out.append(
                f"运行代码时{where}抛出了 {cell.error_name}{detail}。之后的代码没有运行；"
                "隐藏测试仍会调用出错之前已定义的函数。"
            )
        elif cell.status == "timeout":
            out.append(f"代码单元「{cell.id}」运行超时，已停止{SKIPPED}")
        elif cell.status == "dead":
            out.append(f"运行代码单元「{cell.id}」时内核退出（可能调用了 exit、超出内存或进程数限制）{SKIPPED}")
        if cell.truncated:
            out.append(f"代码单元「{cell.id}」 的输出过多，超出部分已丢弃。")
    if report.submission_timed_out:
        out.append("整份提交的运行时间超过上限，内核已被终止。")
    return out
