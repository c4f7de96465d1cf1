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

The pre-forked path is ``Grader(prefork=True)`` (root mode only; see docs/security.md). Run by an
ordinary user, the bench measures today's path in user-namespace mode alone. With ``--as-user``, root
also runs the same bench as the ordinary user the tests use (``course-sandbox-ci``, with a checkout
and venv of its own, made by ``tests/helpers.py``) and prints both.

    .venv/bin/python bench/grade_throughput.py [--rounds 2] [--cell-timeout 2] [--as-user]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
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
    """CPU seconds of this process and everything it starts, from a cgroup v1 cpuacct group.

    Root makes its own group. An ordinary user cannot, so ``--as-user`` hands it one made by root and
    given to the user (``DELEGATED``); only without either does the meter fall back to the CPU of
    reaped children, which misses the sandboxed kernels."""

    DELEGATED = "COURSE_BENCH_CPUACCT"

    def __init__(self) -> None:
        self.group: Path | None = None
        given = os.environ.get(self.DELEGATED)
        if given or (os.geteuid() == 0 and (CPUACCT / "cgroup.procs").is_file()):
            group = Path(given) if given else CPUACCT / f"course-bench-{os.getpid()}"
            try:
                group.mkdir(exist_ok=bool(given))
                (group / "cgroup.procs").write_text(str(os.getpid()))
                self.group = group
            except OSError:
                self.group = None
        self.owned = self.group is not None and not given
        self.how = "cgroup cpuacct" if self.group else "reaped children (sandboxed kernels missed)"

    def now(self) -> float:
        if self.group is not None:
            return int((self.group / "cpuacct.usage").read_text()) / 1e9
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def close(self) -> None:
        if self.group is not None and self.owned:
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


def both(label: str, runs: int, work: Callable[[bool], Run], paths: tuple[bool, ...]) -> dict[bool, list[Run]]:
    """Run ``work`` for each path ``runs`` times, alternating which goes first."""
    out: dict[bool, list[Run]] = {p: [] for p in paths}
    for i in range(runs):
        for prefork in paths if i % 2 == 0 else paths[::-1]:
            out[prefork].append(work(prefork))
    first = [runs[0].totals for runs in out.values()]
    if any(t != first[0] for t in first):
        raise SystemExit(f"{label}: the two paths disagree: {first}")
    return out


def best(runs: list[Run]) -> Run:
    return min(runs, key=lambda r: r.wall)


def as_ordinary_user(args: argparse.Namespace) -> str:
    """The same bench, run by the ordinary user in a checkout of its own (user-namespace mode)."""
    if os.geteuid() != 0:
        raise SystemExit("--as-user needs root: it creates the user and its checkout")
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import ordinary_user_checkout

    checkout = ordinary_user_checkout()
    group = CPUACCT / f"course-bench-user-{os.getpid()}"
    group.mkdir()
    for path in (group, group / "cgroup.procs", group / "tasks"):  # cgroup v1 delegation: by ownership
        shutil.chown(path, checkout.user)
    argv = [f"{CpuMeter.DELEGATED}={group}", str(checkout.python), "bench/grade_throughput.py"]
    argv += ["--rounds", str(args.rounds), "--jobs", str(args.jobs), "--cell-timeout", str(args.cell_timeout)]
    try:
        proc = checkout.run(argv, timeout=3600)
    finally:
        for _ in range(50):  # the group empties once the user's last process is gone
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    if proc.returncode != 0:
        raise SystemExit(f"the bench as {checkout.user} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return f"as the ordinary user {checkout.user} (user-namespace mode, today's path only):\n{proc.stdout}"


def main() -> None:
    parser = argparse.ArgumentParser(description="grading throughput: today's path against pre-forked kernels")
    parser.add_argument("--rounds", type=int, default=2, help="runs per path and setting; the best is shown")
    parser.add_argument("--jobs", type=int, default=2, help="parallel graders for the throughput runs")
    parser.add_argument("--cell-timeout", type=float, default=2.0, help="per-cell timeout for the hostile runs")
    parser.add_argument("--as-user", action="store_true", help="also run the bench as an ordinary user (needs root)")
    args = parser.parse_args()
    course = load_course(ROOT)
    paths = (False, True) if os.geteuid() == 0 else (False,)  # pre-forked kernels need root mode
    meter = CpuMeter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ordinary, hostile = notebooks(course, Path(tmp))
            n = len(ordinary)
            for prefork in paths:  # warm the page cache and imports
                grade(course, ordinary[:2], 1, prefork, meter)
            par = both("jobs", args.rounds, lambda p: grade(course, ordinary, args.jobs, p, meter), paths)
            one = both("serial", args.rounds, lambda p: grade(course, ordinary, 1, p, meter), paths)
            quick = dataclasses.replace(
                course, limits=dataclasses.replace(course.limits, cell_timeout_s=args.cell_timeout)
            )
            bad = both("hostile", 1, lambda p: grade(quick, hostile, args.jobs, p, meter), paths)
    finally:
        meter.close()
    print(f"lesson04, {n} notebooks (20 correct, 10 buggy, 10 blank), sandbox on, best of {args.rounds}")
    print(f"CPU counted by {meter.how}")
    rate = {p: n / best(r).wall for p, r in par.items()}
    wall1 = {p: best(r).wall / n for p, r in one.items()}
    cpu = {p: min(r.cpu for r in runs) / n for p, runs in par.items()}
    own = {p: min(r.own for r in runs) / n for p, runs in par.items()}
    cpu1 = {p: min(r.cpu for r in runs) / n for p, runs in one.items()}
    rows = [
        (f"notebooks/s, --jobs {args.jobs}", rate, "{:.2f}", lambda d: d[True] / d[False]),
        ("wall s per notebook, --jobs 1", wall1, "{:.3f}", lambda d: d[False] / d[True]),
        (f"CPU s per notebook, --jobs {args.jobs}", cpu, "{:.3f}", lambda d: d[False] / d[True]),
        ("  of which in the grader process", own, "{:.3f}", None),
        ("CPU s per notebook, --jobs 1", cpu1, "{:.3f}", lambda d: d[False] / d[True]),
    ]
    print(f"{'':34}{'today':>10}{'pre-forked':>12}{'ratio':>8}")
    for name, values, fmt, ratio in rows:
        line = f"{name:34}{fmt.format(values[False]):>10}"
        if True in values:
            line += f"{fmt.format(values[True]):>12}" + (f"{ratio(values):>8.2f}" if ratio else "")
        print(line)
    names = ", ".join(HOSTILE)
    print(f"hostile ({names}; cell timeout {args.cell_timeout:g} s), --jobs {args.jobs}:")
    walls = "".join(f"{bad[p][0].wall:>{w}.2f}" for p, w in zip(paths, (10, 12), strict=False))
    print(f"{'  wall s for the lot':34}{walls}")
    print(f"{'  totals':34}{str(bad[False][0].totals):>10}  (same on every path)")
    if args.as_user:
        print()
        print(as_ordinary_user(args))


if __name__ == "__main__":
    main()
