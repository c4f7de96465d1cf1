"""Per-lesson costs: how long each reference solution takes on the hidden tests, and to grade end to end.

The exercises are meant to run in well under a second on a CPU, and grading a reference
submission of any lesson should take under 5 s on a 2-core machine (sandbox on).

    .venv/bin/python bench/lesson_costs.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.checks import ReferenceStudent, reference_namespace, run_checks  # noqa: E402
from grader.course import load_course  # noqa: E402
from grader.grade import Grader  # noqa: E402
from grader.notebook import build_notebook, dumps  # noqa: E402


class InProcess:
    """Stands in for the kernel session: the reference solution behind the grader's own
    ``ReferenceStudent``, which converts data and reports exceptions exactly as the kernel does."""

    def __init__(self, namespace) -> None:
        self.student = ReferenceStudent(namespace)

    def call(self, function, args, kwargs):
        return self.student.call(function, *args, **kwargs)


def main() -> None:
    course = load_course(ROOT)
    grader = Grader(course, sandbox=True)
    print(f"{'lesson':10} {'solution on tests (s)':>22} {'grade reference (s)':>20} {'score':>6}")
    try:
        for slug, lesson in sorted(course.lessons.items()):
            kit = grader.kit(slug)  # load checks and rubric outside the timed region
            start = time.perf_counter()
            results = run_checks(kit.checks, InProcess(reference_namespace(lesson)), kit.ref, "bench")  # type: ignore[arg-type]
            run = time.perf_counter() - start
            assert all(r.passed for r in results), f"{slug}: the reference fails its own checks in-process"
            data = dumps(build_notebook(lesson, reference=True)).encode()
            grader.grade_bytes(data, "warm-up.ipynb")
            start = time.perf_counter()
            result = grader.grade_bytes(data, f"{slug}.ipynb")
            graded = time.perf_counter() - start
            print(f"{slug:10} {run:22.3f} {graded:20.3f} {result['total']:6g}")
    finally:
        grader.close()


if __name__ == "__main__":
    main()
