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
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import SourceError
from .kernel import KernelSession, StudentCallError, decode_args, plain_data
from .lesson import CODE_POINTS, Lesson
from .text import clean

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
    fault: str = ""  # for instructors only: the check itself broke (a course fault), with its traceback


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


class ReferenceStudent:
    """The reference solution behind the ``student`` interface, run in the grader.

    Arguments and results go through the kernel's own plain-data conversion, and an exception is
    reported the way the kernel reports it, so that a check sees the same data from both. It is
    used to decide whose fault a broken check is."""

    def __init__(self, ref: types.SimpleNamespace) -> None:
        self._ref = ref

    def call(self, function: str, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self._ref, function, None)
        if not callable(fn):
            raise StudentCallError("missing", function)
        try:
            value = fn(*decode_args(list(args)), **decode_args(dict(kwargs)))
        except Exception as exc:  # noqa: BLE001 - e.g. a ValueError a check expects
            name = next((k.__name__ for k in type(exc).__mro__ if k.__module__ == "builtins"), "Exception")
            raise StudentCallError("error", function, name) from None
        try:
            return plain_data(value)
        except (TypeError, ValueError):
            raise StudentCallError("bad-result", function) from None


def ndarray(values: Any, dtype: str = "float64") -> dict[str, Any]:
    """An argument that arrives in the kernel as ``numpy.array(values, dtype=dtype)``.

    ``values`` may be nested lists or a numpy array (sent as its ``tolist()``).
    """
    if hasattr(values, "tolist"):
        values = values.tolist()
    return {"__ndarray__": values, "dtype": dtype}


def normal_matrix(rng: random.Random, rows: int, cols: int, spread: float = 1.0) -> Any:
    """A float64 numpy matrix of normal entries drawn from the check's ``rng``.

    Drawn with ``rng.gauss`` (not numpy's generator) so that a check's inputs follow from its seed alone.
    """
    import numpy as np  # only lessons with array exercises need it

    return np.array([[rng.gauss(0.0, spread) for _ in range(cols)] for _ in range(rows)], dtype=np.float64)


def raises_value_error(student: Any, function: str, *args: Any, **kwargs: Any) -> bool:
    """Whether the student's function rejects these arguments with a ValueError.

    Any other failure (a blank not filled, a timeout, a dead kernel) is re-raised, so the student
    reads that reason instead of a generic wrong value."""
    try:
        student.call(function, *args, **kwargs)
    except StudentCallError as exc:
        if exc.kind == "error":
            return exc.detail == "ValueError"
        raise
    return False


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
        if isinstance(exc, SyntaxError) and exc.filename == str(path):
            line, what = exc.lineno, exc.msg
        else:
            lines = _frames_in(exc.__traceback__, str(path))
            line, what = (lines[-1] if lines else None), str(exc)
        raise SourceError(display, line, f"cannot import: {type(exc).__name__}: {clean(what, 500)}") from None
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
    where = ""
    if exc.line is not None:
        where = f"（代码单元「{exc.cell}」第 {exc.line} 行）" if exc.cell else f"（第 {exc.line} 行）"
    return {
        "missing": f"找不到函数 「{name}」：请不要改名或删除它",
        "blank": f"调用 「{name}」 时遇到未填写的空白 「______」",
        "error": f"调用 「{name}」 时抛出了 {exc.detail}{where}",
        "timeout": f"调用 「{name}」 超时",
        "dead": "内核已停止（超时、资源超限或进程退出），无法继续测试",
        "bad-result": f"「{name}」 的返回值不是本题要求的普通数据（数字、字符串、列表、字典）",
    }[exc.kind]


WRONG_VALUE = "返回值与预期不符"
WRONG_SHAPE = "返回值的类型或结构与要求不符"
COURSE_FAULT = "评分程序在检查这一项时出错，这不是你的问题；助教会处理并重新评分"


def run_checks(checks: list[Check], session: KernelSession, ref: types.SimpleNamespace, seed: str) -> list[CheckResult]:
    """Run every check; each earns its points or zero, with a reason the student may read.

    A check that raises something other than AssertionError or StudentCallError is run again, with
    the same random inputs, against the reference solution. If it breaks there too the check itself
    is broken: a course fault, reported to instructors (``CheckResult.fault``) and not blamed on the
    student. If it does not, the student's data made it break: a wrong type or structure."""
    results = []
    student = Student(session)
    for c in checks:
        try:
            outcome = _run_one(c, student, ref, seed)
            passed, reason, fault = (outcome is not False), ("" if outcome is not False else WRONG_VALUE), ""
        except AssertionError:
            passed, reason, fault = False, WRONG_VALUE, ""
        except StudentCallError as exc:
            passed, reason, fault = False, _reason(exc), ""
        except Exception as exc:  # noqa: BLE001 - a broken check, or e.g. indexing a result of the wrong shape
            fault = _fault_on_reference(c, ref, seed, exc)
            passed, reason = False, (COURSE_FAULT if fault else WRONG_SHAPE)
        results.append(CheckResult(c.name, c.description, c.points if passed else 0.0, c.points, passed, reason, fault))
    return results


def _run_one(c: Check, student: Any, ref: types.SimpleNamespace, seed: str) -> Any:
    """Call a check with the fixtures it asks for; ``rng`` depends only on the seed and the check."""
    digest = hashlib.sha256(f"{seed}\0{c.name}".encode()).digest()
    fixtures = {"student": student, "ref": ref, "rng": random.Random(int.from_bytes(digest[:8], "big"))}
    return c.func(**{k: v for k, v in fixtures.items() if k in inspect.signature(c.func).parameters})


def _fault_on_reference(c: Check, ref: types.SimpleNamespace, seed: str, first: BaseException) -> str:
    """The instructor-facing fault text when check ``c`` also breaks on the reference, else ''."""
    try:
        _run_one(c, ReferenceStudent(ref), ref, seed)
    except (AssertionError, StudentCallError):
        return ""
    except Exception as exc:  # noqa: BLE001 - the check is broken whoever answers
        return describe_fault(c, exc)
    return ""


def describe_fault(c: Check, exc: BaseException) -> str:
    """``check NAME raised TYPE: message`` and the traceback's frames in checks.py, as ``checks.py:LINE``."""
    filename = c.func.__code__.co_filename
    shown = f"solutions/{Path(filename).parent.name}/checks.py"
    frames = [
        f"  {shown}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename == filename
    ]
    head = f"check {c.name} raised {type(exc).__name__}: {clean(str(exc), 500)}"
    return "\n".join([head, *frames])


def _frames_in(tb: types.TracebackType | None, filename: str) -> list[int]:
    """Line numbers of the traceback's frames in ``filename``, outermost first."""
    return [line for frame, line in traceback.walk_tb(tb) if frame.f_code.co_filename == filename]
