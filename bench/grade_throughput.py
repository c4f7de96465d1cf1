"""Grading throughput on lesson 4's reference submission.

Grades N copies with --jobs equal to the number of cores (sandbox on), then measures the cost of
one submission at a time with and without the sandbox. Figures to compare run to run:
notebooks per second, seconds per notebook, and the sandbox's added seconds per submission.

For scale: nbgrader 0.9.6 was measured at 0.67 notebooks/s and Otter 7 at 0.26 on this 2-core
machine; the kernel start-up floor is 0.65–0.8 s.

    .venv/bin/python bench/grade_throughput.py [-n 20]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.batch import default_jobs, grade_many, plan  # noqa: E402
from grader.course import load_course  # noqa: E402

REFERENCE = ROOT / "examples/submissions/lesson04/2026001/lesson04.ipynb"  # the reference sample


def run(n: int, jobs: int, sandbox: bool) -> float:
    course = load_course(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(n):
            p = Path(tmp) / f"copy{i:03d}.ipynb"
            shutil.copyfile(REFERENCE, p)
            paths.append(p)
        start = time.perf_counter()
        results = grade_many(course, plan(course, paths, None), jobs=jobs, sandbox=sandbox, progress=False)
        elapsed = time.perf_counter() - start
    assert all(r["total"] == 10 for r in results), "the reference must score 10 in every copy"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description="grading throughput benchmark")
    parser.add_argument("-n", type=int, default=20, help="copies to grade in the parallel run (default 20)")
    parser.add_argument("--serial", type=int, default=8, help="copies for the one-at-a-time runs (default 8)")
    args = parser.parse_args()
    jobs = default_jobs()
    run(2, jobs, True)  # warm the page cache and imports
    batch = run(args.n, jobs, True)
    on = run(args.serial, 1, True)
    off = run(args.serial, 1, False)
    print(f"lesson04 reference, {args.n} notebooks, --jobs {jobs} (cores), sandbox on")
    print(f"  notebooks per second        {args.n / batch:.2f}")
    print(f"  seconds per notebook        {batch / args.n:.3f}")
    print(f"one at a time (--jobs 1), {args.serial} notebooks")
    print(f"  seconds per notebook, sandbox on   {on / args.serial:.3f}")
    print(f"  seconds per notebook, sandbox off  {off / args.serial:.3f}")
    print(f"  sandbox cost per submission        {(on - off) / args.serial:+.3f} s")


if __name__ == "__main__":
    main()
