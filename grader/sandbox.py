"""The command line that starts a student kernel inside a bubblewrap sandbox.

The sandbox sees a read-only Python runtime and nothing else of the host: no course repo, no
``solutions/``, no other submission, no home directory and no network. It runs as an unprivileged
uid of its own, in its own PID namespace, under rlimits for memory, processes, file size and CPU.
The grader reaches the kernel through unix sockets in ``ipc_dir``, the one host folder bound in.
See docs/security.md for the threat model.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import shutil
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

from .course import Limits
from .errors import CourseError

INSTALL_HINT = (
    "student code runs only inside a bubblewrap sandbox, and bwrap was not found or cannot create "
    "namespaces here. Install it with `apt-get install bubblewrap` (scripts/setup does this), "
    "or pass --no-sandbox when grading code you trust."
)

# Each live kernel gets a uid of its own, so that an rlimit on processes in one kernel (which Linux
# counts per uid) cannot starve another kernel of threads. A uid is leased with a lock file, so that
# two grader processes on one machine (a CLI batch and a service worker, say) never share one.
_UID_BASE = 61000
_UID_COUNT = 2000
_LOCK_DIR = Path(tempfile.gettempdir()) / "course-kernel-uids"
_uid_counter = itertools.count()
_uid_lock = threading.Lock()


class UidLease:
    """An exclusive claim on one sandbox uid, held until ``release`` (or the process ends)."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd: int | None = fd

    @classmethod
    def acquire(cls) -> UidLease:
        if not _LOCK_DIR.is_dir():
            _LOCK_DIR.mkdir(exist_ok=True)
            os.chmod(_LOCK_DIR, 0o1777)  # shared by every grader on the machine, whoever runs it
        with _uid_lock:
            start = next(_uid_counter) + os.getpid()
        for offset in range(_UID_COUNT):
            uid = _UID_BASE + (start + offset) % _UID_COUNT
            try:
                # Read-only is enough for flock, so a lock file another user created still works.
                fd = os.open(_LOCK_DIR / str(uid), os.O_RDONLY | os.O_CREAT, 0o644)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            return cls(uid, fd)
        raise CourseError(f"all {_UID_COUNT} sandbox uids from {_UID_BASE} are in use; grade fewer at once")

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file drops the lock
            self._fd = None


def _runtime_paths() -> list[Path]:
    """Folders the kernel needs to import Python, ipykernel and numpy: all read-only."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.base_exec_prefix)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        paths.add(Path(sysconfig.get_paths()[key]))
    resolved = sorted({p.resolve() for p in paths if p.exists()})
    # Drop paths already inside another bound path.
    return [p for p in resolved if not any(p != q and q in p.parents for q in resolved)]


def _parents(paths: list[Path]) -> list[Path]:
    out: set[Path] = set()
    for p in paths:
        out.update(a for a in p.parents if a != Path("/"))
    return sorted(out, key=lambda a: len(a.parts))


def sandbox_prefix(ipc_dir: Path, limits: Limits, uid: int) -> list[str]:
    """bwrap + setpriv + prlimit, ready to be followed by the kernel's own argv."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise CourseError(INSTALL_HINT)
    runtime = [p for p in _runtime_paths() if not str(p).startswith("/usr/")]
    cmd = [
        bwrap,
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/bin",
        "/bin",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(limits.file_size_mb * 4 * 1024 * 1024),
        "--tmpfs",
        "/tmp",
    ]
    for parent in _parents(runtime + [ipc_dir]):
        cmd += ["--perms", "0755", "--dir", str(parent)]
    for path in runtime:
        cmd += ["--ro-bind", str(path), str(path)]
    cmd += ["--bind", str(ipc_dir), str(ipc_dir), "--chdir", "/tmp", "--clearenv"]
    env = {
        "HOME": "/tmp",
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "IPYTHONDIR": "/tmp/.ipython",
        "MPLBACKEND": "Agg",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "JUPYTER_PLATFORM_DIRS": "1",
        "JUPYTER_RUNTIME_DIR": "/tmp/.jupyter",
    }
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    cmd += [
        "--",
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]
    cmd += [
        "prlimit",
        f"--as={limits.memory_mb * 1024 * 1024}",
        f"--nproc={limits.max_processes}",
        f"--fsize={limits.file_size_mb * 1024 * 1024}",
        f"--cpu={limits.cpu_seconds}",
        "--core=0",
        "--",
    ]
    return cmd


def check_available() -> None:
    """Fail with the install hint unless a trivial sandbox starts here."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        lease = UidLease.acquire()
        try:
            cmd = sandbox_prefix(Path(tmp), Limits(), lease.uid) + [sys.executable, "-c", "pass"]
            proc = subprocess.run(cmd, capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            raise CourseError(INSTALL_HINT) from None
        finally:
            lease.release()
        if proc.returncode != 0:
            detail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise CourseError(f"{INSTALL_HINT} (bwrap said: {detail[0]})")
