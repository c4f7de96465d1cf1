"""Grading throughput: today's one-kernel-per-submission path against pre-forked kernels, same run.

A mixed batch of lesson-4 notebooks built from the lesson's reference (20 correct, 10 buggy,
10 blank) is graded with the sandbox on, by each path in turn (the order alternates per round, so
that drift on a shared machine hits both alike), and then a few hostile notebooks (an infinite
loop, a fork bomb, a memory hog, a kernel that shoots at its parent) are graded by each path.
Printed per path:

- notebooks per second at ``--jobs 2`` (and the ratio pre-forked / today),
- wall seconds per notebook at ``--jobs 1``,
- CPU seconds per notebook, counted in a cgroup v1 ``cpuacct`` group that the bench moves itself
  into, so every kernel and sandbox process is counted (needs root; otherwise the CPU of reaped
  children is used, and said so).

Both paths must give every notebook the same result; the bench stops if they do not.

The pre-forked path is ``Grader(prefork=True)`` (root mode only; see docs/security.md).

    .venv/bin/python bench/grade_throughput.py [--rounds 2] [--cell-timeout 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.batch import grade_many, plan  # noqa: E402
from grader.course import Course, load_course  # noqa: E402
from grader.notebook import build_notebook, dumps  # noqa: E402

CPUACCT = Path("/sys/fs/cgroup/cpuacct")

# Bugs a student might make, as (old, new) edits of the reference code.
BUGS = [
    ("for name, nbytes in reversed(grads):", "for name, nbytes in grads:"),
    ("current_bytes + nbytes > bucket_bytes", "current_bytes + nbytes >= bucket_bytes"),
    ("return float(max(total_backward, end))", "return float(total_backward + end)"),
    ("return int(mbs * grad_acc * dp * seq)", "return int(mbs * grad_acc * dp)"),
    ("def gbs_tokens(mbs, grad_acc, dp, seq):", "def gbs_tokens(mbs, grad_acc, dp, seq)"),
]
HOSTILE = {
    "infinite-loop": "while True:\n    pass\n",
    "fork-bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"),
    "memory-hog": "hog = []\nwhile True:\n    hog.append(bytearray(2**24))\n",
    "kill-parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
}


def notebooks(course: Course, folder: Path) -> tuple[list[Path], list[Path]]:
    """Write the ordinary batch (20 correct, 10 buggy, 10 blank) and the hostile notebooks."""
    lesson = course.lessons["lesson04"]
    texts: list[str] = []
    for _ in range(20):
        texts.append(dumps(build_notebook(lesson, reference=True)))
    for i in range(10):
        nb = build_notebook(lesson, reference=True)
        cell = next(c for c in nb.cells if c.metadata["course"]["role"] == "exercise")
        old, new = BUGS[i % len(BUGS)]
        assert old in cell.source, old
        cell.source = cell.source.replace(old, new)
        texts.append(dumps(nb))
    for _ in range(10):
        texts.append(dumps(build_notebook(lesson)))
    ordinary = []
    for i, text in enumerate(texts):
        path = folder / f"nb{i:02d}.ipynb"
        path.write_text(text, encoding="utf-8")
        ordinary.append(path)
    hostile = []
    for name, attack in HOSTILE.items():
        nb = build_notebook(lesson, reference=True)
        cell = next(c for c in nb.cells if c.metadata["course"]["role"] == "exercise")
        cell.source = attack + "\n" + cell.source
        path = folder / f"hostile-{name}.ipynb"
        path.write_text(dumps(nb), encoding="utf-8")
        hostile.append(path)
    return ordinary, hostile


class CpuMeter:
    """CPU seconds of this process and everything it starts, from a cgroup v1 cpuacct group."""

    def __init__(self) -> None:
        self.group: Path | None = None
        if os.geteuid() == 0 and (CPUACCT / "cgroup.procs").is_file():
            group = CPUACCT / f"course-bench-{os.getpid()}"
            try:
                group.mkdir()
                (group / "cgroup.procs").write_text(str(os.getpid()))
                self.group = group
            except OSError:
                self.group = None
        self.how = "cgroup cpuacct" if self.group else "reaped children (kernels of pre-forked runs missed)"

    def now(self) -> float:
        if self.group is not None:
            return int((self.group / "cpuacct.usage").read_text()) / 1e9
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def close(self) -> None:
        if self.group is not None:
            (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
            for _ in range(50):  # the group empties once the last kernel is reaped
                try:
                    self.group.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


@dataclasses.dataclass
class Run:
    wall: float
    cpu: float  # everything: grader, sandboxes, kernels
    own: float  # the grader process alone (its threads included)
    totals: list[float]


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def grade(course: Course, paths: list[Path], jobs: int, prefork: bool, meter: CpuMeter) -> Run:
    cpu0, own0, start = meter.now(), own_cpu(), time.perf_counter()
    results = grade_many(course, plan(course, paths, None), jobs=jobs, sandbox=True, progress=False, prefork=prefork)
    wall, cpu, own = time.perf_counter() - start, meter.now() - cpu0, own_cpu() - own0
    return Run(wall, cpu, own, [r["total"] for r in results])


def both(label: str, runs: int, work: Callable[[bool], Run]) -> dict[bool, list[Run]]:
    """Run ``work`` for each path ``runs`` times, alternating which goes first."""
    out: dict[bool, list[Run]] = {False: [], True: []}
    for i in range(runs):
        for prefork in (False, True) if i % 2 == 0 else (True, False):
            out[prefork].append(work(prefork))
    if out[False][0].totals != out[True][0].totals:
        raise SystemExit(f"{label}: the two paths disagree: {out[False][0].totals} vs {out[True][0].totals}")
    return out


def best(runs: list[Run]) -> Run:
    return min(runs, key=lambda r: r.wall)


def main() -> None:
    parser = argparse.ArgumentParser(description="grading throughput: today's path against pre-forked kernels")
    parser.add_argument("--rounds", type=int, default=2, help="runs per path and setting; the best is shown")
    parser.add_argument("--jobs", type=int, default=2, help="parallel graders for the throughput runs")
    parser.add_argument("--cell-timeout", type=float, default=2.0, help="per-cell timeout for the hostile runs")
    args = parser.parse_args()
    course = load_course(ROOT)
    meter = CpuMeter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ordinary, hostile = notebooks(course, Path(tmp))
            n = len(ordinary)
            grade(course, ordinary[:2], 1, False, meter)  # warm the page cache and imports
            grade(course, ordinary[:2], 1, True, meter)
            par = both("jobs", args.rounds, lambda p: grade(course, ordinary, args.jobs, p, meter))
            one = both("serial", args.rounds, lambda p: grade(course, ordinary, 1, p, meter))
            quick = dataclasses.replace(
                course, limits=dataclasses.replace(course.limits, cell_timeout_s=args.cell_timeout)
            )
            bad = both("hostile", 1, lambda p: grade(quick, hostile, args.jobs, p, meter))
    finally:
        meter.close()
    print(f"lesson04, {n} notebooks (20 correct, 10 buggy, 10 blank), sandbox on, best of {args.rounds}")
    print(f"CPU counted by {meter.how}")
    print(f"{'':34}{'today':>10}{'pre-forked':>12}{'ratio':>8}")
    rate = {p: n / best(r).wall for p, r in par.items()}
    print(
        f"{f'notebooks/s, --jobs {args.jobs}':34}{rate[False]:>10.2f}{rate[True]:>12.2f}{rate[True] / rate[False]:>8.2f}"
    )
    wall1 = {p: best(r).wall / n for p, r in one.items()}
    print(
        f"{'wall s per notebook, --jobs 1':34}{wall1[False]:>10.3f}{wall1[True]:>12.3f}{wall1[False] / wall1[True]:>8.2f}"
    )
    cpu = {p: min(r.cpu for r in runs) / n for p, runs in par.items()}
    print(
        f"{f'CPU s per notebook, --jobs {args.jobs}':34}{cpu[False]:>10.3f}{cpu[True]:>12.3f}{cpu[False] / cpu[True]:>8.2f}"
    )
    own = {p: min(r.own for r in runs) / n for p, runs in par.items()}
    print(f"{'  of which in the grader process':34}{own[False]:>10.3f}{own[True]:>12.3f}")
    cpu1 = {p: min(r.cpu for r in runs) / n for p, runs in one.items()}
    print(f"{'CPU s per notebook, --jobs 1':34}{cpu1[False]:>10.3f}{cpu1[True]:>12.3f}{cpu1[False] / cpu1[True]:>8.2f}")
    names = ", ".join(HOSTILE)
    print(f"hostile ({names}; cell timeout {args.cell_timeout:g} s), --jobs {args.jobs}:")
    print(f"{'  wall s for the lot':34}{bad[False][0].wall:>10.2f}{bad[True][0].wall:>12.2f}")
    print(f"{'  totals':34}{str(bad[False][0].totals):>10}  (same on both paths)")


if __name__ == "__main__":
    main()
