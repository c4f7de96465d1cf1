"""Hostile submissions of lesson 4. Each must earn no more than its honest content, finish within the
limits, and leave a clear message; the grader and the rest of the batch carry on.

The code under attack is either the untouched exercise (honest score 0 on code) or a wrong solution
whose honest outcome is computed in-process on the same inputs, so "no more than honest" is checked
check by check, not assumed, and does not depend on how loaded the machine is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import pytest
from helpers import REPO, item, reference_code, submission

from grader.checks import ReferenceStudent, run_checks
from grader.course import load_course
from grader.grade import Grader
from grader.kernel import KernelSession, RunReport
from grader.sandbox import detect_mode

COURSE = load_course(REPO)
LIMITS = dataclasses.replace(
    COURSE.limits,
    cell_timeout_s=3,
    submission_timeout_s=12,
    output_bytes_per_cell=20_000,
    output_bytes_total=50_000,
    memory_mb=768,
    max_processes=48,
)
FAST = dataclasses.replace(COURSE, limits=LIMITS)
# Any committed sample submission: a file an attack might try to overwrite.
SAMPLE = sorted((REPO / "examples/submissions/lesson04").rglob("*.ipynb"))[0]
BLANK = next(c for c in COURSE.lessons["lesson04"].exercises).code
# A wrong but honest attempt: bucket order ignored, no overlap modelled.
WRONG = """
def bucket_gradients(grads, bucket_bytes):
    return [[name] for name, _ in grads]

def simulate_dp_step(layer_backward_s, bucket_comm_s, overlap):
    return float(sum(layer_backward_s) + sum(bucket_comm_s))

def gbs_tokens(mbs, grad_acc, dp, seq):
    return 0
"""


@pytest.fixture(scope="module")
def grader():
    g = Grader(FAST, sandbox=True)
    yield g
    g.close()


class _InProcess:
    """The kernel's call interface over code run in this process: no timeouts, no load effects."""

    def __init__(self, code: str) -> None:
        namespace: dict = {}
        exec(code, namespace)  # noqa: S102 - the test's own honest code
        self._student = ReferenceStudent(types.SimpleNamespace(**namespace))

    def call(self, function, args, kwargs):
        return self._student.call(function, *args, **kwargs)


def honest_checks(grader, honest_code: str, result) -> dict[str, bool]:
    """Which checks ``honest_code`` passes on the very inputs the graded attack got (same seed).

    Measured in-process, so that a loaded machine cannot lower the baseline: a kernel call that
    times out under load once made the honest score lower than the attack's, and the test flaky."""
    kit = grader.kit("lesson04")
    results = run_checks(kit.checks, _InProcess(honest_code), kit.ref, f"lesson04\0{result['sha256']}")  # type: ignore[arg-type]
    return {r.name: r.passed for r in results}


def assert_no_gain(grader, honest_code: str, result) -> None:
    """Every check the attack passed, the honest code passes on the same inputs."""
    honest = honest_checks(grader, honest_code, result)
    gained = [c["name"] for c in item(result, "code")["checks"] if c["passed"] and not honest[c["name"]]]
    assert gained == [], f"the attack passed checks the honest code fails: {gained}"


def grade(grader, code, **kw):
    start = time.monotonic()
    result = grader.grade_bytes(submission(COURSE, code=code, **kw), "attack.ipynb")
    elapsed = time.monotonic() - start
    # Catches a hang, not slowness: the time limits themselves are asserted by the student's messages
    # (超时), and a loaded machine can spend many seconds just starting a kernel.
    assert elapsed < 4 * (LIMITS.submission_timeout_s + 5), f"took {elapsed:.1f}s"
    return result


def code_points(result):
    return item(result, "code")["points"]


def messages(result):
    return " ".join(item(result, "code")["messages"]) + " ".join(result["errors"])


# --- reading what it should not --------------------------------------------------------------
def test_reading_the_course_repo_fails(grader):
    attack = f"""
import re
src = open({str(REPO / "lessons/lesson04.qmd")!r}, encoding='utf-8').read()
code = re.search(r"#\\| solves: ex-dp\\n(.*?)```", src, re.S).group(1)
exec(code)
"""
    r = grade(grader, BLANK + attack)
    assert code_points(r) == 0 and "FileNotFoundError" in messages(r)


def test_nothing_of_the_host_is_visible_from_a_kernel():
    session = KernelSession(LIMITS, sandbox=True)
    session.start()
    try:
        report = RunReport()
        session.run_cells(
            [
                (
                    "probe",
                    """
import os
def probe(paths):
    out = {}
    for p in paths:
        try:
            with open(p, 'rb') as fh:
                out[p] = 'read %d bytes' % len(fh.read(10))
        except Exception as e:
            out[p] = type(e).__name__
    return {'root': sorted(os.listdir('/')), 'files': out, 'uid': os.getuid(), 'pid': os.getpid()}
""",
                )
            ],
            report,
        )
        targets = [
            str(REPO / "solutions/lesson04/checks.py"),
            str(REPO / "solutions/lesson04/rubric.yml"),
            str(REPO / "pyproject.toml"),
            "/root/.bashrc",
            "/etc/passwd",
            "/etc/shadow",
        ]
        got = session.call("probe", [targets], {})
    finally:
        session.close()
    assert got["uid"] != 0 and got["pid"] < 10  # unprivileged, own PID namespace
    assert all(v in ("FileNotFoundError", "PermissionError") for v in got["files"].values()), got["files"]
    assert "etc" not in got["root"] and "home" not in got["root"]


# --- network ---------------------------------------------------------------------------------
def _local_addresses() -> list[str]:
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return [a for a in out if ":" not in a] + ["127.0.0.1"]


def test_no_network_to_loopback_or_host_addresses():
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen(5)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    accepted: list[object] = []
    done = threading.Event()

    def accept():
        while not done.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    session = KernelSession(LIMITS, sandbox=True)
    session.start()
    try:
        session.run_cells(
            [
                (
                    "net",
                    """
import socket
def connect(hosts, port):
    out = {}
    for h in hosts:
        try:
            socket.create_connection((h, port), timeout=1).close()
            out[h] = 'connected'
        except OSError as e:
            out[h] = type(e).__name__
    return out
""",
                )
            ],
            RunReport(),
        )
        got = session.call("connect", [_local_addresses(), port], {})
    finally:
        session.close()
        done.set()
        t.join()
        listener.close()
    assert accepted == [] and "connected" not in got.values(), got


# --- resources -------------------------------------------------------------------------------
def test_infinite_loop_times_out(grader):
    r = grade(grader, BLANK + "\nwhile True:\n    pass\n")
    assert code_points(r) == 0 and "超时" in messages(r)


def test_a_timed_out_cell_leaves_nothing_on_the_graders_stderr(tmp_path):
    """Found here: after a cell timed out, nbclient's output poller was left pending, and asyncio
    printed "Task was destroyed but it is pending!" with a stack when the grader exited."""
    path = tmp_path / "loop.ipynb"
    path.write_bytes(submission(COURSE, code=BLANK + "\nwhile True:\n    pass\n"))
    script = (  # as `course grade` does it: grading threads, each with an event loop of its own
        "import dataclasses, sys; from pathlib import Path\n"
        "from grader.batch import grade_many, plan; from grader.course import load_course\n"
        "c = load_course(Path(sys.argv[1]))\n"
        "c = dataclasses.replace(c, limits=dataclasses.replace(c.limits, cell_timeout_s=1))\n"
        "r = grade_many(c, plan(c, [Path(sys.argv[2])], None), jobs=1, sandbox=True, progress=False)\n"
        "print(r[0]['total'])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(REPO), str(path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "6.0", proc.stdout + proc.stderr
    assert "Task was destroyed" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_sleep_forever_times_out(grader):
    r = grade(grader, BLANK + "\nimport time\ntime.sleep(10**6)\n")
    assert code_points(r) == 0 and "超时" in messages(r)


def test_slow_functions_hit_the_submission_limit(grader):
    slow = reference_code(COURSE).replace('    """以 token 计', '    import time; time.sleep(2.5)\n    """以 token 计')
    slow = slow.replace("    if not overlap:", "    import time; time.sleep(2.5)\n    if not overlap:")
    r = grade(grader, slow)
    assert code_points(r) < 4 and ("超时" in messages(r) or "内核已停止" in messages(r))


def test_memory_fork_and_disk_bombs_leave_the_batch_intact(tmp_path):
    from grader.batch import grade_many, plan

    bombs = {
        "memory": "\nhog = []\nwhile True:\n    hog.append(bytearray(50 * 1024 * 1024))\n",
        "fork": "\nimport os\nwhile True:\n    os.fork()\n",
        "disk": "\nwith open('/tmp/fill', 'wb') as fh:\n    while True:\n        fh.write(b'x' * 1024 * 1024)\n",
    }
    paths = []
    for name, bomb in bombs.items():
        p = tmp_path / f"{name}.ipynb"
        p.write_bytes(submission(COURSE, code=BLANK + bomb))
        paths.append(p)
    ref = tmp_path / "reference.ipynb"
    ref.write_bytes(submission(COURSE))
    paths.append(ref)
    start = time.monotonic()
    results = grade_many(FAST, plan(FAST, paths, None), jobs=2, sandbox=True, progress=False)
    assert time.monotonic() - start < 4 * (LIMITS.submission_timeout_s + 5)
    assert [code_points(r) for r in results[:3]] == [0, 0, 0]
    assert all(messages(r) for r in results[:3])
    assert results[3]["total"] == 10 and results[3]["passed"]
    assert subprocess.run(["true"], timeout=5).returncode == 0  # the machine still runs things


def test_processes_and_threads_do_not_outlive_the_submission(grader):
    marker = "course-attack-marker-31337"
    attack = (
        BLANK
        + f"""
import subprocess, threading, time
subprocess.Popen(['/bin/sh', '-c', 'exec -a {marker} sleep 1000'])
def spin():
    while True:
        time.sleep(0.01)
threading.Thread(target=spin, daemon=False).start()
"""
    )
    r = grade(grader, attack)
    assert code_points(r) == 0
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert marker not in ps


@pytest.mark.parametrize(
    "attack, words",
    [
        ("import os\nos._exit(0)\n", "内核退出"),
        ("import sys\nsys.exit(0)\n", ""),
        ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", "PermissionError"),
        (
            "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\n",
            "",
        ),
        ("import sys\nsys.setrecursionlimit(10**6)\ndef f(n):\n    return f(n + 1)\nf(0)\n", ""),
    ],
)
def test_killing_exiting_and_crashing(grader, attack, words):
    if words == "PermissionError" and not detect_mode().root:
        # In user-namespace mode the sandbox's pid 1 has the kernel's uid: the kill is allowed, and
        # Linux drops it, as it drops every signal sent to a PID namespace's init from inside.
        words = ""
    r = grade(grader, BLANK + "\n" + attack)
    assert code_points(r) == 0 and words in messages(r)


def test_output_flood_is_capped(grader):
    r = grade(grader, BLANK + "\nfor _ in range(200):\n    print('x' * 100_000)\n")
    assert code_points(r) == 0 and "输出过多" in messages(r)


# --- forging results -------------------------------------------------------------------------
def test_printing_fake_results_gains_nothing(grader):
    fake = json.dumps({"total": 10, "passed": True, "items": [{"id": "code", "points": 4}]})
    attack = (
        WRONG
        + f"""
print({fake!r})
print('{{"ok": [[\\"d\\"], [\\"c\\", \\"b\\"], [\\"a\\"]]}}')
def _say(*a, **k):
    print({fake!r})
    return 0
gbs_tokens = _say
"""
    )
    r = grade(grader, attack)
    assert_no_gain(grader, WRONG, r)
    assert r["total"] < 10


@pytest.mark.parametrize(
    "patch",
    [
        "import numpy\nnumpy.allclose = lambda *a, **k: True\nnumpy.isclose = lambda *a, **k: True\n",
        "import builtins, math\nbuiltins.isinstance = lambda *a: True\nbuiltins.len = lambda x: 0\nmath.isclose = lambda *a, **k: True\n",
        "import json\n_real = json.dumps\njson.dumps = lambda obj, *a, **k: _real({'ok': 0})\njson.loads = lambda s, *a, **k: {'args': [], 'kwargs': {}}\n",
        "from IPython.core.interactiveshell import InteractiveShell\nInteractiveShell.showtraceback = lambda *a, **k: None\nInteractiveShell.showsyntaxerror = lambda *a, **k: None\n",
    ],
)
def test_patching_what_tests_rely_on_gains_nothing(grader, patch):
    r = grade(grader, WRONG + "\n" + patch)
    assert_no_gain(grader, WRONG, r)


def test_exceptions_do_not_carry_hidden_inputs_out(grader):
    # The class name and the message both encode the hidden arguments; a metaclass-free runtime class
    # that even claims to come from builtins.
    leak = """def _leak(*args):
    name = 'Leak_' + '_'.join(str(abs(hash(repr(a))) % 10**9) + str(a)[:40].replace(' ', '') for a in args)
    raise type(name, (KeyError,), {'__module__': 'builtins'})('hidden=' + repr(args))

def bucket_gradients(grads, bucket_bytes):
    _leak(grads, bucket_bytes)

def simulate_dp_step(layer_backward_s, bucket_comm_s, overlap):
    _leak(layer_backward_s, bucket_comm_s, overlap)

def gbs_tokens(mbs, grad_acc, dp, seq):
    _leak(mbs, grad_acc, dp, seq)
"""
    r = grade(grader, leak)
    text = messages(r)
    assert code_points(r) == 0
    assert "Leak_" not in text and "hidden=" not in text and "4096" not in text
    raise_line = (
        leak.splitlines().index("    raise type(name, (KeyError,), {'__module__': 'builtins'})('hidden=' + repr(args))")
        + 1
    )
    assert f"抛出了 KeyError（代码单元「ex-dp」第 {raise_line} 行）" in text, text


HOSTILE_OBJECTS = """
class Liar(list):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __len__(self): raise SystemExit
    def __iter__(self): raise SystemExit
    def __repr__(self): return "[['d'], ['c', 'b'], ['a']]"
    def __del__(self): print('{"total": 10}')
    def __reduce__(self): return (print, ('pwned',))
class Num(float):
    def __eq__(self, other): return True
def bucket_gradients(grads, bucket_bytes):
    return Liar()
def simulate_dp_step(layer_backward_s, bucket_comm_s, overlap):
    return Num(0)
def gbs_tokens(mbs, grad_acc, dp, seq):
    return Liar()
"""


def test_hostile_return_values_gain_nothing(grader):
    r = grade(grader, HOSTILE_OBJECTS)
    assert code_points(r) == 0 and "不是本题要求的普通数据" in messages(r)


# --- files, tags, ids, kernelspecs ------------------------------------------------------------
def test_writing_where_results_go_has_no_effect(grader, tmp_path):
    target = tmp_path / "result.json"
    attack = (
        BLANK
        + f"""
import os
for p in [{str(target)!r}, {str(SAMPLE)!r}]:
    try:
        open(p, 'w').write('{{"total": 10, "passed": true}}')
    except OSError:
        pass
"""
    )
    before = SAMPLE.read_bytes()
    r = grade(grader, attack)
    assert code_points(r) == 0 and not target.exists()
    assert SAMPLE.read_bytes() == before


def test_skip_execution_tag_and_foreign_kernelspec_are_ignored(grader):
    def tamper(nb):
        nb.metadata["kernelspec"] = {"name": "bash", "display_name": "Bash", "language": "bash"}
        for cell in nb.cells:
            cell.metadata.setdefault("tags", []).append("skip-execution")
            cell.metadata["nbgrader"] = {"grade": True, "points": 100}
            cell.outputs = [] if cell.cell_type == "code" else None
            if cell.outputs is None:
                del cell["outputs"]

    r = grader.grade_bytes(submission(COURSE, mutate=tamper), "tags.ipynb")
    assert r["total"] == 10  # the reference code still runs in python3, tags and extra metadata ignored
    r = grader.grade_bytes(submission(COURSE, code=BLANK, mutate=tamper), "tags-blank.ipynb")
    assert code_points(r) == 0


def test_exercise_id_swapped_with_another_cell(grader):
    def swap(nb):
        ex = next(c for c in nb.cells if c.id == "ex-dp")
        q1 = next(c for c in nb.cells if c.id == "q1")
        ex.metadata["course"]["id"], q1.metadata["course"]["id"] = "q1", "ex-dp"
        ex.id, q1.id = "q1", "ex-dp"

    r = grader.grade_bytes(submission(COURSE, mutate=swap), "swap.ipynb")
    assert code_points(r) == 0 and item(r, "q1")["points"] == 0
    assert "类型或角色被改动" in messages(r)


def test_sandbox_off_is_recorded():
    g = Grader(FAST, sandbox=False)
    try:
        r = g.grade_bytes(submission(COURSE), "trusted.ipynb")
    finally:
        g.close()
    assert r["total"] == 10 and r["sandbox"] is False and any("--no-sandbox" in e for e in r["errors"])


def test_grade_refuses_without_bubblewrap(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no bwrap on PATH
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "--root",
            str(REPO),
            "grade",
            str(SAMPLE),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2 and "apt-get install bubblewrap" in proc.stderr and "--no-sandbox" in proc.stderr


# --- limits per submission, checked from outside the sandbox ---------------------------------
def _run_in_kernel(session: KernelSession, code: str) -> RunReport:
    report = RunReport()
    session.run_cells([("attack", code)], report)
    return report


IPC_FLOOD = """
import os, sys
ipc = os.path.dirname(sys.argv[sys.argv.index('-f') + 1])
def flood(mb):
    written = 0
    try:
        with open(os.path.join(ipc, 'course-attack-flood'), 'wb') as fh:
            for _ in range(mb):
                fh.write(b'x' * 1024 * 1024)
                fh.flush()
                written += 1024 * 1024
    except OSError as e:
        return [written, type(e).__name__]
    return [written, 'none']
"""

DEEP_TREE = """
import os, sys
ipc = os.path.dirname(sys.argv[sys.argv.index('-f') + 1])
def litter(entries):
    made = 0
    for top in (ipc, '/tmp', os.getcwd()):
        path = os.path.join(top, 'course-attack-litter')
        try:
            for i in range(entries):
                path = os.path.join(path, 'd%d' % (i % 7))
                os.makedirs(path, exist_ok=True)
                with open(os.path.join(path, 'f'), 'wb') as fh:
                    fh.write(b'y' * 50_000)
                made += 2
            for root, dirs, files in os.walk(os.path.join(top, 'course-attack-litter'), topdown=False):
                os.chmod(root, 0o500)  # read-only folders: a naive cleanup cannot delete inside them
        except OSError:
            pass
    return made
"""


def _left_on_host() -> list[str]:
    """What the attacks below wrote that is visible on the host, in the temporary folders or one level down."""
    found: list[str] = []
    for top in {tempfile.gettempdir(), "/tmp", "/var/tmp"}:
        for pattern in ("course-attack-*", "*/course-attack-*"):
            found += [str(p) for p in Path(top).glob(pattern)]
    return found


def test_the_ipc_folder_is_capped_and_leaves_nothing_on_the_host():
    """Finding: a submission wrote 600 MB into its IPC folder (a host folder), against the 64 MB cap
    of its /tmp; another left 3,011 entries (150 MB) of read-only deep tree behind."""
    session = KernelSession(LIMITS, sandbox=True)
    session.start()
    try:
        _run_in_kernel(session, IPC_FLOOD + DEEP_TREE)
        written, error = session.call("flood", [600], {})
        host_bytes = sum(f.stat().st_size for f in session.host_dir.rglob("*") if f.is_file())
        session.call("flood", [0], {})  # frees the tmpfs for the tree
        made = session.call("litter", [3011], {})
    finally:
        session.close()
    cap = LIMITS.file_size_mb * 4 * 1024 * 1024
    assert written <= cap and error == "OSError", (written, error)
    assert host_bytes < 10_000  # only the connection file: the flood never reached the host's disk
    assert made > 100  # the tree was made inside the sandbox...
    assert not session.host_dir.exists()  # ...and nothing of it, or of the kernel, is left outside
    assert _left_on_host() == []


FOUR_HOLDERS = """
import os, time
def grab(mb):
    blocks = []
    try:
        for _ in range(mb // 8):  # in small steps, so each process gets as much as its own limit allows
            blocks.append(bytearray(8 * 1024 * 1024))
    except MemoryError:
        pass
    return blocks
def hold(mb, children):
    for _ in range(children):
        if os.fork() == 0:
            held = grab(mb)
            time.sleep(30)
            os._exit(0)
    held = grab(mb)
    time.sleep(30)
"""


def _tree_pss(root: int) -> int:
    """Proportional set size of ``root`` and all its descendants, found by parent pid from /proc (the
    test's own count; shared pages count once, as the watcher and a memory cgroup count them)."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(name))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        stack.extend(parents.get(pid, []))
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith(b"Pss:")) * 1024
        except (OSError, StopIteration):
            pass
    return total


def test_four_processes_of_one_submission_do_not_hold_more_than_memory_mb():
    """Finding: RLIMIT_AS is per process, so four processes held 3.6 GB against a 1,024 MB limit."""
    mb = LIMITS.memory_mb // 3  # each of the four can hold this under its per-process limit
    session = KernelSession(LIMITS, sandbox=True)
    session.start()
    peak = 0
    done = threading.Event()
    launcher = session.km.provisioner.process.pid  # type: ignore[union-attr]

    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_pss(launcher))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        report = _run_in_kernel(session, FOUR_HOLDERS + f"\nhold({mb}, 3)\n")
        cgroup_peak = session.box.cgroup.peak_memory_bytes() if session.box and session.box.cgroup else None
    finally:
        done.set()
        sampler.join()
        session.close()
    cap = LIMITS.memory_mb * 1024 * 1024
    assert 4 * mb * 1024 * 1024 > cap  # what the submission tried to hold together
    assert report.cells[0].status in ("dead", "timeout", "error")
    if cgroup_peak is not None:  # root mode: the kernel's own count for the submission's cgroup
        assert mb * 2**20 < cgroup_peak <= cap, f"{cgroup_peak / 2**20:.0f} MB"
    else:  # the watcher samples: a submission overshoots by what it allocates before the watcher runs,
        # and the delay grows when the machine is busy (measured: at most 9 %; see docs/security.md)
        assert session.memory_exceeded
        assert peak <= cap * 1.3, f"{peak / 2**20:.0f} MB held together against {LIMITS.memory_mb} MB"


FORKED_READERS = """
import os, time
shared = bytearray(%d * 1024 * 1024)  # touched by the parent only: the children share its pages
for i in range(0, len(shared), 4096):
    shared[i] = 1
kids = []
for _ in range(%d):
    pid = os.fork()
    if pid == 0:
        time.sleep(1)
        os._exit(0 if shared[4096] == 1 else 1)
    kids.append(pid)
done = sum(os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) == 0 for k in kids)
assert done == len(kids), f"{done} of {len(kids)} workers finished"
"""


def test_forked_workers_are_not_charged_for_the_pages_they_share():
    """Finding: the watcher summed resident memory, so a page shared after fork counted once per child,
    and a pool of eight workers forked from a kernel holding a third of the limit was killed for memory
    it did not hold (a held fork bomb too). Shared pages now count once, as the cgroup counts them."""
    mb, children = LIMITS.memory_mb // 3, 8
    # Time is not what this test limits: a loaded machine may take seconds to fault in the pages.
    session = KernelSession(dataclasses.replace(LIMITS, cell_timeout_s=60, submission_timeout_s=120), sandbox=True)
    session.start()
    try:
        report = _run_in_kernel(session, FORKED_READERS % (mb, children))
    finally:
        session.close()
    assert not session.memory_exceeded
    assert report.cells[0].status == "ok", report.cells[0]


BOMB_AND_HOLD = """
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(8)
            os._exit(0)
        n += 1
except OSError:
    pass
time.sleep(8)
"""


def _kernel_processes() -> int:
    count = 0
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                count += b"launch_new_instance" in fh.read()
        except OSError:
            pass
    return count


def test_a_fork_bomb_in_one_grader_does_not_starve_a_kernel_of_another(tmp_path):
    """Finding: two `course grade` processes handed their first kernels the same uid, so a fork bomb
    graded by one made the honest notebook graded by the other get 6/10."""
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(folder, 0o755)
    bomb, honest = folder / "bomb.ipynb", folder / "honest.ipynb"
    bomb.write_bytes(submission(COURSE, code=BLANK + BOMB_AND_HOLD))
    honest.write_bytes(submission(COURSE))
    for p in (bomb, honest):
        os.chmod(p, 0o644)
    cli = [sys.executable, "-m", "grader.cli", "--root", str(REPO), "grade", "--jobs", "1", "--json"]
    bomber = subprocess.Popen([*cli, str(bomb)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _kernel_processes() < COURSE.limits.max_processes // 2:  # the bomb holds its processes
            assert bomber.poll() is None and time.monotonic() < deadline, "the bomb never went off"
            time.sleep(0.05)
        proc = subprocess.run([*cli, str(honest)], capture_output=True, text=True, timeout=120)
    finally:
        bomber.communicate(timeout=120)
    result = json.loads(proc.stdout.splitlines()[0])
    assert result["total"] == 10 and result["passed"], result


# --- memory that no resident set shows, and quotas shared with the grader's uid -------------
HIDDEN_MEMORY = """
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
held = []
def fill(folder, mb):
    written = 0
    try:
        for i in range(mb // 8):
            with open(os.path.join(folder, 'course-attack-%d' % i), 'wb') as fh:
                fh.write(b'z' * (8 << 20))
            written += 8 << 20
    except OSError:
        pass
    return written
def memfds(count):
    made = 0
    try:
        for _ in range(count):
            fd = os.memfd_create('course-attack')
            os.write(fd, b'm' * (8 << 20))
            held.append(fd)
            made += 1
    except OSError:
        pass
    return made
def hide(mb):
    return {
        'root': fill('/', mb), 'dev': fill('/dev', mb), 'shm': fill('/dev/shm', mb),
        'memfd': memfds(mb // 8),
        'sysv': libc.shmget(0, mb << 20, 0o1600) != -1,
        'keyring': libc.syscall(248, b'user', b'course-attack', b'v', 1, -2) != -1,  # add_key
        'inotify': libc.inotify_init() != -1,
        'userns': subprocess.run(['unshare', '-r', 'true']).returncode == 0,
    }
"""


def _sandbox_tree(pid1: int) -> list[int]:
    """The sandbox's processes, found from the host by parent pid."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    parents.setdefault(int(fh.read().rsplit(b")", 1)[1].split()[1]), []).append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    tree, stack = [], [pid1]
    while stack:
        pid = stack.pop()
        tree.append(pid)
        stack.extend(parents.get(pid, []))
    return tree


def _memfd_bytes(pids: list[int]) -> int:
    """Bytes in memfds the processes hold open, read from the host through /proc/<pid>/fd."""
    total = 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                    total += os.stat(f"/proc/{pid}/fd/{fd}").st_size
            except OSError:
                continue
    return total


def test_memory_outside_resident_sets_cannot_be_held():
    """Found here: in user mode the kernel owned the root and /dev tmpfs that bwrap makes (no size cap)
    and could fill memfds; 4 GB and 3.2 GB were held while the memory watcher saw 50 MB. SysV shared
    memory, keyrings, inotify (per-uid quotas shared with the grader) and new user namespaces are
    refused too."""
    session = KernelSession(LIMITS, sandbox=True)
    session.start()
    try:
        _run_in_kernel(session, HIDDEN_MEMORY)
        got = session.call("hide", [256], {})
        assert session.box is not None and session.box.pid1 is not None
        used = {}
        for inside in ("/", "/dev"):  # the sandbox's own file systems, seen from the host
            stat = os.statvfs(session.box.host_path(inside))
            used[inside] = (stat.f_blocks - stat.f_bfree) * stat.f_frsize
        memfd = _memfd_bytes(_sandbox_tree(session.box.pid1))
    finally:
        session.close()
    assert got == {
        "root": 0,
        "dev": 0,
        "shm": 0,
        "memfd": 0,
        "sysv": False,
        "keyring": False,
        "inotify": False,
        "userns": False,
    }
    assert used["/"] < 2**20 and used["/dev"] < 2**20 and memfd == 0, (used, memfd)


SOCKET_BUFFERS = """
import os, socket, time
def buffers(children):
    # Children fill; the kernel process keeps descriptors for its own sockets (ZeroMQ aborts
    # when it finds none, which would end the test with a dead kernel instead of a count).
    r, w = os.pipe()
    for _ in range(children):
        if os.fork() == 0:
            os.close(r)
            os.write(w, fill().to_bytes(4, "big"))
            time.sleep(30)
            os._exit(0)
    os.close(w)
    return max(int.from_bytes(os.read(r, 4), "big") for _ in range(children))
pairs = []
def fill():
    try:
        while True:
            a, b = socket.socketpair()
            a.setblocking(False)
            try:
                while True:
                    a.send(b'q' * 65536)
            except BlockingIOError:
                pass
            pairs.append((a, b))
    except OSError:
        return len(pairs)
"""


def test_socket_buffers_are_bounded_by_descriptors():
    """Found here: socket buffers are in no resident set; in user mode nine processes of one
    submission held 10.8 GB of them (20,000 descriptors each) while the watcher saw 300 MB. Every
    process of a sandbox now has at most ``NOFILE`` descriptors, read from the host."""
    from grader.sandbox import NOFILE

    session = KernelSession(LIMITS, sandbox=True)
    session.start()
    try:
        _run_in_kernel(session, SOCKET_BUFFERS)
        pairs = session.call("buffers", [3], {})
        assert session.box is not None and session.box.pid1 is not None
        tree = _sandbox_tree(session.box.pid1)
        limits = []
        for pid in tree[1:]:  # bwrap's own pid 1 runs no student code
            try:
                text = Path(f"/proc/{pid}/limits").read_text()
            except OSError:
                continue
            row = next(line for line in text.splitlines() if line.startswith("Max open files"))
            limits.append(int(row.split()[4]))  # the hard limit
    finally:
        session.close()
    assert pairs < NOFILE // 2
    assert len(limits) >= 4 and max(limits) <= NOFILE, limits
