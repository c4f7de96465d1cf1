"""Kernels that flood the grader with what it would otherwise store: huge errors, display updates and
widget (comm) state. Each runs through ``course grade --json`` in its own process, whose peak memory
is measured, so the whole path from the kernel's socket to the printed result is covered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, submission

from grader.course import load_course

COURSE = load_course(REPO)
BLANK = next(c for c in COURSE.lessons["lesson04"].exercises).code
# What the grader still holds once a flood is graded: it needs about 100 MB itself. Storing the flood
# (what this guards against) held well over 500 MB.
RETAINED_RSS_MB = 300
# Peak memory depends on load: messages the kernel sends faster than the grader reads them wait in
# ZeroMQ's queue (180-510 MB seen). Before the caps a single flood took the grader past 1 GB.
PEAK_RSS_MB = 1000

ERROR_FLOOD = """
from IPython import get_ipython
for _ in range(40):
    try:
        raise ValueError('e' * 16_000_000)
    except ValueError:
        get_ipython().showtraceback()
"""
DISPLAY_SWAP = """
from IPython.display import display
handles = [display('small', display_id=True) for _ in range(100)]
for _ in range(2):
    for h in handles:
        h.update({'text/plain': 'x' * 4_000_000}, raw=True)
"""
COMM_STATE = """
from comm import create_comm
for _ in range(20):
    c = create_comm(target_name='jupyter.widget', data={'state': {'_model_module': 'm', '_model_name': 'M', 'v': 'x' * 20_000_000}})
    c.send({'method': 'update', 'state': {'v': 'y' * 20_000_000}})
"""
# Runs the CLI in this process and reports its own peak RSS (kB on Linux) on the last stderr line.
_MEASURED_CLI = (
    "import atexit, resource, sys\n"
    "def _report():\n"
    "    print('peak_rss_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "    rss = [l for l in open('/proc/self/status') if l.startswith('VmRSS:')][0].split()[1]\n"
    "    print('retained_rss_kb', rss, file=sys.stderr)\n"
    "atexit.register(_report)\n"
    "from grader.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def measured(stderr: str, name: str) -> int:
    """A memory figure (MB) the measured CLI printed on its last stderr lines."""
    lines = [line for line in stderr.splitlines() if line.startswith(f"{name}_kb ")]
    assert lines, stderr[-2000:]
    return int(lines[-1].split()[1]) // 1024


def grade_measured(path: Path) -> tuple[dict, int, int]:
    """Grade one file with ``course grade --json``; return its result, peak and retained RSS in MB."""
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURED_CLI, "--root", str(REPO), "grade", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    result = json.loads(proc.stdout.splitlines()[0])
    return result, measured(proc.stderr, "peak_rss"), measured(proc.stderr, "retained_rss")


@pytest.mark.parametrize("attack", [ERROR_FLOOD, DISPLAY_SWAP, COMM_STATE], ids=["errors", "display", "comm"])
def test_floods_do_not_grow_the_grader(tmp_path, attack):
    nb = tmp_path / "flood.ipynb"
    nb.write_bytes(submission(COURSE, code=BLANK + attack))
    result, peak_mb, retained_mb = grade_measured(nb)
    code = next(i for i in result["items"] if i["id"] == "code")
    assert retained_mb < RETAINED_RSS_MB, f"grader still holds {retained_mb} MB"
    assert peak_mb < PEAK_RSS_MB, f"grader peaked at {peak_mb} MB"
    assert result["graded"] and code["points"] == 0
    assert any("输出过多" in m for m in code["messages"]), code["messages"]
