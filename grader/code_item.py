"""The 4-point code item: run the student's exercise cells, run the hidden checks, explain the outcome.

The outcome separates what the student may read (``messages``) from what only instructors may read
(``course_faults``: tracebacks of hidden checks that broke, which are the course's fault).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .checks import CheckResult, run_checks
from .kernel import KernelSession, RunReport
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
) -> CodeOutcome:
    """Run the exercise cells in a fresh sandboxed kernel, then every hidden check against it."""
    messages = list(notes)
    report = RunReport()
    results: list[CheckResult] = []
    runnable = [(ex.id, code.get(ex.id)) for ex in lesson.exercises]
    if any(src is None for _, src in runnable):
        messages.append("缺少代码单元，代码部分无法评分。")
    else:
        session = new_session()
        try:
            session.run_cells([(cid, src or "") for cid, src in runnable], report)
            results = run_checks(checks, session, ref, seed)
        except Exception as exc:  # noqa: BLE001 - e.g. the sandbox could not start
            messages.append(f"无法在沙箱中运行你的代码（{type(exc).__name__}），代码部分记 0 分；请联系助教。")
        finally:
            session.close()
    messages += _run_messages(report)
    for c in results:
        messages.append(("✓ " if c.passed else "✗ ") + c.description + ("" if c.passed else f"：{c.reason}"))
    return CodeOutcome(round(sum(c.points for c in results), 2), messages, results, report)


def _run_messages(report: RunReport) -> list[str]:
    out = []
    for cell in report.cells:
        if cell.status == "error":
            out.append(f"运行代码单元「{cell.id}」 时出错（{cell.error_name}）；隐藏测试仍会尝试调用已定义的函数。")
        elif cell.status == "timeout":
            out.append(f"代码单元「{cell.id}」 运行超时，已停止。")
        elif cell.status == "dead":
            out.append(f"运行代码单元「{cell.id}」 时内核退出（可能调用了 exit、超出内存或进程数限制）。")
        if cell.truncated:
            out.append(f"代码单元「{cell.id}」 的输出过多，超出部分已丢弃。")
    if report.submission_timed_out:
        out.append("整份提交的运行时间超过上限，内核已被终止。")
    return out
