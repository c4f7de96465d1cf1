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
# Found by the red team: ZeroMQ reads a whole message into the grader before anyone looks at it, and
# its size limit is per frame. One message of 200 frames of 15 MB (the same buffer each time, so it
# costs the kernel nothing) took the grader to 2.9 GB; 100 MB frames in a loop, to 2.5 GB.
MANY_FRAMES = """
k = get_ipython().kernel
frame = b'x' * 15_000_000
k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'a'}, parent=k.get_parent(), buffers=[frame] * 200)
"""
BIG_FRAMES = """
k = get_ipython().kernel
frame = b'x' * 100_000_000
for _ in range(30):
    k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'a'}, parent=k.get_parent(), buffers=[frame])
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


@pytest.mark.parametrize(
    "attack",
    [ERROR_FLOOD, DISPLAY_SWAP, COMM_STATE, MANY_FRAMES, BIG_FRAMES],
    ids=["errors", "display", "comm", "many-frames", "big-frames"],
)
def test_floods_do_not_grow_the_grader(tmp_path, attack):
    nb = tmp_path / "flood.ipynb"
    nb.write_bytes(submission(COURSE, code=BLANK + attack))
    result, peak_mb, retained_mb = grade_measured(nb)
    code = next(i for i in result["items"] if i["id"] == "code")
    assert retained_mb < RETAINED_RSS_MB, f"grader still holds {retained_mb} MB"
    assert peak_mb < PEAK_RSS_MB, f"grader peaked at {peak_mb} MB"
    assert result["graded"] and code["points"] == 0
    assert any("输出过多" in m for m in code["messages"]), code["messages"]


def _frames(*parts: tuple[int, int]) -> bytes:
    """ZMTP 3 frames: (flags, body size) each, with a long size where the body needs one."""
    out = b""
    for flags, size in parts:
        head = bytes([flags | 0x02]) + size.to_bytes(8, "big") if size > 255 else bytes([flags, size])
        out += head + b"b" * size
    return out


GREETING = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x01" + b"NULL" + b"\0" * 48


def test_message_limit_follows_frames_split_anywhere():
    """The relay's parser must let through every message under the cap however the bytes arrive,
    count all frames of a message together, and refuse framing it cannot follow."""
    from grader.kernel import _MessageLimit

    honest = GREETING + _frames((0x04, 30), (0x01, 300), (0x01, 40), (0x00, 600), (0x00, 700))
    for step in (1, 7, 64, len(honest)):
        limit = _MessageLimit(1000)
        assert all(limit.feed(honest[i : i + step]) for i in range(0, len(honest), step)), step
    too_big = GREETING + _frames((0x01, 600), (0x00, 600))  # 1,200 bytes in one message
    assert not _MessageLimit(1000).feed(too_big)
    assert not _MessageLimit(1000).feed(b"\xff" + b"\0" * 8 + b"\x7f" + b"\x01")  # ZMTP 1/2
