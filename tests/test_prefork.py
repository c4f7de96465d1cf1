"""Pre-forked kernels: siblings from one zygote are as separate as kernels started one by one.

Each test drives ``ZygoteKernelManager`` (and so ``ZygoteProvisioner``) with nbclient, the way the
grader does. The attacks run as the student would: code in a cell of the forked kernel.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from jupyter_core.utils import run_sync
from nbclient import NotebookClient

from grader.course import Limits
from grader.provisioner import ChildLimits, ForkedKernel, Identity, ZygoteKernelManager, ZygotePool
from grader.sandbox import NOFILE, UidLease, _runtime_paths

# A fresh /tmp holds the kernel's own folders, plus read-only binds of a Python runtime that lives
# under /tmp (a checkout there with its venv), which the kernel needs to import anything.
FRESH_TMP = sorted({".ipython", ".kernel"} | {p.parts[2] for p in _runtime_paths() if p.parts[1:2] == ("tmp",)})

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the pre-forked sandbox runs in root mode here")

REPO = Path(__file__).resolve().parents[1]
SMALL = Limits(max_processes=32, cpu_seconds=30)


class Kernel:
    """One forked kernel with an nbclient client, run cell by cell."""

    def __init__(self, pool: ZygotePool, folder: Path, limits: Limits = SMALL, cgroups: tuple[Path, ...] = ()) -> None:
        self.lease = UidLease.acquire()
        self.uid = self.lease.uid
        identity = Identity(self.uid, self.uid, cgroups=cgroups)
        path = folder / f"kernel-{self.uid}.json"
        self.km = ZygoteKernelManager(pool, identity, ChildLimits.from_limits(limits), str(path))
        run_sync(self.km.start_kernel)()
        self.nb = nbformat.v4.new_notebook()
        self.client = NotebookClient(self.nb, km=self.km, timeout=20, allow_errors=True, kernel_name="python3")
        self.client.start_new_kernel_client()

    @property
    def process(self) -> ForkedKernel:
        process = self.km.provisioner.process
        assert isinstance(process, ForkedKernel)
        return process

    def run(self, code: str) -> object:
        """Run a cell; return what it printed last, parsed as JSON. Fails the test on an error."""
        cell = nbformat.v4.new_code_cell(code)
        self.nb.cells.append(cell)
        self.client.execute_cell(cell, len(self.nb.cells) - 1)
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, errors[0].get("evalue")
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")
        return json.loads(text.strip().splitlines()[-1]) if text.strip() else None

    def close(self) -> None:
        if self.client.kc is not None:
            self.client.kc.stop_channels()
        run_sync(self.km.shutdown_kernel)(now=True)
        self.lease.release()


@pytest.fixture(scope="module")
def pool() -> Iterator[ZygotePool]:
    pool = ZygotePool()
    pool.start()
    yield pool
    pool.close()


def _processes_of(uid: int) -> list[int]:
    """Host pids running as ``uid``, seen from outside every namespace."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        if str(uid) in uids:
            found.append(int(entry))
    return found


def _memory_contains(pid: int, needles: list[bytes]) -> list[bytes]:
    """Which needles occur anywhere in the readable memory of ``pid`` (read from outside, as root)."""
    found: set[bytes] = set()
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            fields = line.split()
            if "r" not in fields[1] or (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except OSError:
                continue
            found.update(n for n in needles if n in chunk)
    return sorted(found)


def test_a_forked_kernel_is_confined(pool: ZygotePool, tmp_path: Path) -> None:
    kernel = Kernel(pool, tmp_path)
    try:
        seen = kernel.run(
            "import os, json\n"
            "status = open('/proc/self/status').read().split('\\n')\n"
            "caps = [l.split()[1] for l in status if l.startswith(('CapEff', 'CapPrm', 'CapBnd'))]\n"
            "print(json.dumps([os.getuid(), os.getpid(), sorted(e for e in os.listdir('/proc') if e.isdigit()),"
            f" caps, os.listdir('/tmp'), os.listdir('/dev/shm'), os.path.exists({str(REPO / 'solutions')!r})]))"
        )
        assert seen == [kernel.uid, 2, ["1", "2"], ["0" * 16] * 3, FRESH_TMP, [], False]
        assert not kernel.process.poll()
        kc = kernel.client.kc
        info = run_sync(kc._async_recv_reply)(kc.kernel_info(), timeout=10)
        assert "debugger" not in info["content"]["supported_features"]  # graded kernels carry none
        # The memory limit leaves the student what a kernel started by bwrap leaves (a forked
        # kernel must not start with its address space full of the zygote's reservations).
        assert kernel.run("print(len(bytearray(600 * 2**20)) // 2**20)") == 600
    finally:
        kernel.close()
    assert _processes_of(kernel.uid) == []


def test_siblings_cannot_see_or_signal_each_other(pool: ZygotePool, tmp_path: Path) -> None:
    first, second = Kernel(pool, tmp_path), Kernel(pool, tmp_path)
    try:
        for me, other in ((first, second), (second, first)):
            host_pids = [other.process.pid, other.process.kernel_pid()]
            outcome = me.run(
                "import os, json, ctypes\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "out = []\n"
                f"for pid in {host_pids!r}:\n"
                "    try:\n"
                "        os.kill(pid, 0); out.append('signalled')\n"
                "    except ProcessLookupError:\n"
                "        out.append('no such process')\n"
                "    out.append(libc.ptrace(16, pid, None, None) == -1 and ctypes.get_errno())\n"  # PTRACE_ATTACH
                "    out.append(os.path.exists(f'/proc/{pid}'))\n"
                "print(json.dumps(out))"
            )
            # ptrace is refused by the system-call filter (EPERM) or finds no such process (ESRCH).
            assert outcome[0::3] == ["no such process"] * 2 and outcome[2::3] == [False] * 2
            assert all(errno in (1, 3) for errno in outcome[1::3])
        # Both still run, and neither repeats the random stream the zygote would hand every fork.
        draw = "import json, random, numpy; print(json.dumps([random.random(), numpy.random.random()]))"
        a, b = first.run(draw), second.run(draw)
        assert isinstance(a, list) and isinstance(b, list) and a[0] != b[0] and a[1] != b[1]
    finally:
        first.close()
        second.close()


def test_nothing_carries_over_and_the_zygote_holds_no_secret(pool: ZygotePool, tmp_path: Path) -> None:
    secret = secrets.token_hex(16)
    first = Kernel(pool, tmp_path)
    key = first.km.session.key
    try:
        first.run(
            f"s = {secret!r} * 4\n"
            f"open('/tmp/left.txt', 'w').write(s)\nopen('/dev/shm/left', 'w').write(s)\n"
            "import os\nos.makedirs('/tmp/deep/tree', exist_ok=True)\nprint(1)"
        )
        assert pool.zygote_pid is not None
        # Neither the student's code nor the kernel's key ever reached the zygote.
        assert _memory_contains(pool.zygote_pid, [secret.encode(), key]) == []
        second = Kernel(pool, tmp_path)
        try:
            view = second.run(
                "import os, json, glob\n"
                "print(json.dumps([sorted(os.listdir('/tmp')), os.listdir('/dev/shm'),"
                " glob.glob('/tmp/**/left*', recursive=True)]))"
            )
            assert view == [FRESH_TMP, [], []]
            # Nor does its memory hold it: a fork of the zygote starts from pages no submission touched.
            assert _memory_contains(second.process.kernel_pid(), [secret.encode()]) == []
        finally:
            second.close()
    finally:
        first.close()
    third = Kernel(pool, tmp_path)  # after the first is gone too
    try:
        assert third.run("import os, json; print(json.dumps(sorted(os.listdir('/tmp'))))") == FRESH_TMP
    finally:
        third.close()


def test_a_dead_zygote_is_replaced_and_running_kernels_carry_on(tmp_path: Path) -> None:
    pool = ZygotePool()
    try:
        pool.start()
        kernel = Kernel(pool, tmp_path)
        try:
            # From inside, the zygote is out of sight: the kernel's parent is its own init, which it
            # may not signal, and no other pid is visible.
            assert kernel.run(
                "import os, json\n"
                "out = []\n"
                "for pid in [os.getppid()] + [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:\n"
                "    try:\n"
                "        os.kill(pid, 9); out.append('sent')\n"
                "    except OSError as exc:\n"
                "        out.append(type(exc).__name__)\n"
                "print(json.dumps(out))"
            ) == ["PermissionError", "PermissionError"]
            assert kernel.run("print(3)") == 3  # the signals to init were dropped
            zygote = pool.zygote_pid
            assert zygote is not None
            os.kill(zygote, signal.SIGKILL)  # the zygote dies, whatever the cause
            assert kernel.run("print(4)") == 4  # a kernel in flight loses nothing
            after = Kernel(pool, tmp_path)
            try:
                assert after.run("print(5)") == 5
                assert pool.restarts == 1 and pool.zygote_pid not in (None, zygote)
            finally:
                after.close()
        finally:
            kernel.close()
    finally:
        pool.close()


def test_a_fork_bomb_and_a_memory_hog_do_not_starve_the_next_kernel(pool: ZygotePool, tmp_path: Path) -> None:
    bomb = Kernel(pool, tmp_path)
    try:
        made = bomb.run(
            "import os, time, json\n"
            "n = 0\n"
            "for _ in range(500):\n"
            "    try:\n"
            "        pid = os.fork()\n"
            "    except OSError:\n"
            "        break\n"
            "    if pid == 0:\n"
            "        try:\n"
            "            hog = bytearray(64 * 2**20)\n"  # and each child holds memory
            "        except MemoryError:\n"
            "            pass\n"
            "        time.sleep(60)\n"
            "        os._exit(0)\n"
            "    n += 1\n"
            "print(json.dumps(n))"
        )
        assert isinstance(made, int) and 10 <= made < SMALL.max_processes  # stopped by its own limit
        assert len(_processes_of(bomb.uid)) > 10  # and still alive, holding its processes and memory
        honest = Kernel(pool, tmp_path)
        try:
            assert (
                honest.run(
                    "import subprocess, json\n"
                    "out = subprocess.run(['python3', '-c', 'print(6)'], capture_output=True, text=True).stdout\n"
                    "big = bytearray(200 * 2**20)\n"
                    "print(json.dumps(int(out) + len(big) // 2**20))"
                )
                == 206
            )
        finally:
            honest.close()
    finally:
        bomb.close()
    assert _processes_of(bomb.uid) == []  # the whole submission died with its kernel


def test_a_cgroup_given_in_the_identity_holds_the_whole_submission(pool: ZygotePool, tmp_path: Path) -> None:
    root = Path("/sys/fs/cgroup/pids")
    if not (root / "cgroup.procs").is_file() or not os.access(root, os.W_OK):
        pytest.skip("no writable cgroup v1 pids hierarchy here")
    group = root / f"course-prefork-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "pids.max").write_text("12")
        kernel = Kernel(pool, tmp_path, limits=Limits(max_processes=64), cgroups=(group,))
        try:
            assert str(kernel.process.kernel_pid()) in (group / "cgroup.procs").read_text().split()
            made = kernel.run(
                "import os, time, json\nn = 0\n"
                "for _ in range(40):\n"
                "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
                "    if pid == 0:\n        time.sleep(60); os._exit(0)\n"
                "    n += 1\n"
                "print(json.dumps(n))"
            )
            assert isinstance(made, int) and made < 12  # the group's cap, below the rlimit of 64
        finally:
            kernel.close()
    finally:
        _remove_cgroup(group)


def _remove_cgroup(group: Path) -> None:
    """rmdir once the last killed process has left (the kernel may need a moment to reap them)."""
    for _ in range(500):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.01)
    group.rmdir()


def test_a_forked_kernel_has_the_system_call_filter_and_descriptor_limit(pool: ZygotePool, tmp_path: Path) -> None:
    """The same seccomp filter and RLIMIT_NOFILE as a kernel bwrap starts: no memfd (memory the
    watcher cannot see), no keyring shared through the leased uid, no new user namespace."""
    kernel = Kernel(pool, tmp_path)
    try:
        seen = kernel.run(
            "import ctypes, json, os, resource\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def refused(rc):\n"
            "    return rc == -1 and ctypes.get_errno() in (1, 38)\n"
            "out = [resource.getrlimit(resource.RLIMIT_NOFILE)[0]]\n"
            "out.append(refused(libc.memfd_create(b'x', 0)))\n"
            "out.append(refused(libc.syscall(248, b'user', b'k', b'v', 1, -2)))  # add_key\n"
            "out.append(refused(libc.unshare(0x10000000)))  # CLONE_NEWUSER\n"
            "print(json.dumps(out))"
        )
        assert seen == [NOFILE, True, True, True]
    finally:
        kernel.close()
