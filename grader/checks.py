"""Hidden tests: how ``solutions/lessonNN/checks.py`` declares them and how they are run.

A check is a plain function decorated with ``@check(points=...)``. Like a pytest test it declares
what it needs by parameter name:

- ``student``: a handle whose ``call(name, *args)`` runs the student's function in the sandboxed
  kernel and returns plain data (or raises StudentCallError);
- ``ref``: the lesson's reference solution, executed in the grader (trusted instructor code);
- ``rng``: a ``random.Random`` seeded per submission and check, for inputs drawn at grading time.

The docstring's first line says, in Chinese, what the check verifies. It is the only thing the
student sees about a check: never its inputs, expected values or source.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import random
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import SourceError
from .kernel import KernelSession, StudentCallError
from .lesson import CODE_POINTS, Lesson

FIXTURES = ("student", "ref", "rng")


@dataclass(frozen=True)
class Check:
    name: str
    points: float
    description: str
    func: Callable[..., Any]


@dataclass
class CheckResult:
    name: str
    description: str
    points: float
    max: float
    passed: bool
    reason: str  # empty when passed; a student-safe explanation otherwise


def check(points: float) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a function in a lesson's checks.py as a hidden test worth ``points``."""

    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        func.__course_points__ = points  # type: ignore[attr-defined]
        return func

    return mark


class Student:
    """The narrow interface from a check to the student's code: call a function, get data."""

    def __init__(self, session: KernelSession) -> None:
        self._session = session

    def call(self, function: str, *args: Any, **kwargs: Any) -> Any:
        return self._session.call(function, list(args), dict(kwargs))


def ndarray(values: Any, dtype: str = "float64") -> dict[str, Any]:
    """An argument that arrives in the kernel as ``numpy.array(values, dtype=dtype)``."""
    return {"__ndarray__": values, "dtype": dtype}


def close(got: Any, expected: Any, rel: float = 1e-9, abs_tol: float = 1e-12) -> bool:
    """Structural equality of plain data with a float tolerance; never trusts ``got``'s type."""
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, (int, float)):
        return (
            type(got) in (int, float)
            and math.isfinite(got)
            and math.isclose(got, expected, rel_tol=rel, abs_tol=abs_tol)
        )
    if isinstance(expected, (list, tuple)):
        return (
            type(got) is list
            and len(got) == len(expected)
            and all(close(g, e, rel, abs_tol) for g, e in zip(got, expected))
        )
    if isinstance(expected, dict):
        return (
            type(got) is dict
            and set(got) == {str(k) for k in expected}
            and all(close(got[str(k)], v, rel, abs_tol) for k, v in expected.items())
        )
    raise TypeError(f"cannot compare with expected value of type {type(expected).__name__}")


def load_checks(lesson: Lesson, folder: Path, display: str) -> list[Check]:
    """Import ``checks.py`` from a lesson's solutions folder and validate the declared points."""
    path = folder / "checks.py"
    if not path.is_file():
        raise SourceError(display, None, "missing checks.py: the hidden tests of this lesson")
    spec = importlib.util.spec_from_file_location(f"course_checks_{lesson.slug}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - report an instructor's broken file clearly
        raise SourceError(
            display, getattr(exc, "lineno", None), f"cannot import: {type(exc).__name__}: {exc}"
        ) from None
    checks = []
    for name, func in inspect.getmembers(module, inspect.isfunction):
        if not hasattr(func, "__course_points__"):
            continue
        line = func.__code__.co_firstlineno
        unknown = [p for p in inspect.signature(func).parameters if p not in FIXTURES]
        if unknown:
            raise SourceError(
                display, line, f"check {name} asks for unknown fixture(s) {unknown}; available: {', '.join(FIXTURES)}"
            )
        doc = (inspect.getdoc(func) or "").strip().splitlines()
        if not doc:
            raise SourceError(
                display, line, f"check {name} needs a docstring saying what it verifies (shown to students)"
            )
        checks.append(Check(name, float(func.__course_points__), doc[0], func))
    checks.sort(key=lambda c: c.func.__code__.co_firstlineno)
    total = sum(c.points for c in checks)
    if not math.isclose(total, CODE_POINTS):
        raise SourceError(display, None, f"the checks' points add up to {total:g}, not {CODE_POINTS}")
    return checks


def reference_namespace(lesson: Lesson) -> types.SimpleNamespace:
    """Run the lesson's solution cells in the grader and expose what they define."""
    namespace: dict[str, Any] = {"__name__": f"reference_{lesson.slug}"}
    for cell in lesson.solutions:
        exec(compile(cell.code, f"{lesson.path}:{cell.line}", "exec"), namespace)  # noqa: S102 - instructor code
    return types.SimpleNamespace(**{k: v for k, v in namespace.items() if not k.startswith("__")})


def _reason(exc: StudentCallError) -> str:
    name = exc.function
    return {
        "missing": f"找不到函数 「{name}」：请不要改名或删除它",
        "blank": f"调用 「{name}」 时遇到未填写的空白 「______」",
        "error": f"调用 「{name}」 时抛出了 {exc.detail}",
        "timeout": f"调用 「{name}」 超时",
        "dead": "内核已停止（超时、资源超限或进程退出），无法继续测试",
        "bad-result": f"「{name}」 的返回值不是本题要求的普通数据（数字、字符串、列表、字典）",
    }[exc.kind]


def run_checks(checks: list[Check], session: KernelSession, ref: types.SimpleNamespace, seed: str) -> list[CheckResult]:
    """Run every check; each earns its points or zero, with a reason the student may read."""
    results = []
    student = Student(session)
    for c in checks:
        digest = hashlib.sha256(f"{seed}\0{c.name}".encode()).digest()
        fixtures = {"student": student, "ref": ref, "rng": random.Random(int.from_bytes(digest[:8], "big"))}
        wanted = {k: v for k, v in fixtures.items() if k in inspect.signature(c.func).parameters}
        try:
            outcome = c.func(**wanted)
            passed, reason = (outcome is not False), ("" if outcome is not False else "返回值与预期不符")
        except AssertionError:
            passed, reason = False, "返回值与预期不符"
        except StudentCallError as exc:
            passed, reason = False, _reason(exc)
        except Exception:  # noqa: BLE001 - e.g. indexing a result of the wrong shape
            passed, reason = False, "返回值的类型或结构与要求不符"
        results.append(CheckResult(c.name, c.description, c.points if passed else 0.0, c.points, passed, reason))
    return results
