"""The sandbox a student kernel runs in: bubblewrap, and limits that hold per submission.

The sandbox sees a read-only Python runtime and nothing else of the host: no course repo, no
``solutions/``, no other submission, no home directory and no network. Its only writable place is
its own ``/tmp``, a size-capped tmpfs that vanishes with the sandbox; the kernel's IPC sockets live
there too, and the grader reaches them through ``/proc/<pid>/root``. So nothing a submission writes
ever lands on the host's disks.

Two modes, chosen by who runs the grader (see docs/security.md):

- **root mode**: the kernel runs as a uid leased for it alone (``UidLease``), and, where the cgroup
  v1 hierarchy is writable, in a cgroup of its own that caps the memory and the process count of
  the whole submission.
- **user-namespace mode** (an ordinary user): bubblewrap gives each kernel a user namespace of its
  own. Linux (5.14 and later) counts ``RLIMIT_NPROC`` per user namespace and uid, so a fork bomb in
  one kernel cannot starve another. The memory of the submission's process tree is summed by a
  watcher in the grader, which kills the whole sandbox over the cap.

In both, rlimits per process (address space, processes, descriptors, file size, CPU) stay as a
backstop, the root and ``/dev`` are read-only, and a seccomp filter refuses the system calls that
would hold memory no resident set shows or draw on quotas Linux keeps per uid (``DENIED_SYSCALLS``).
"""

from __future__ import annotations

import ctypes
import fcntl
import itertools
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .course import Limits
from .errors import CourseError

INSTALL_HINT = (
    "student code runs only inside a bubblewrap sandbox, and bwrap was not found or cannot create "
    "namespaces here. Install it with `apt-get install bubblewrap` (scripts/setup does this), "
    "or pass --no-sandbox when grading code you trust."
)
USERNS_HINT = (
    "as an ordinary user, the sandbox needs unprivileged user namespaces (sysctl "
    "user.max_user_namespaces > 0; on Debian kernel.unprivileged_userns_clone=1; on Ubuntu "
    "kernel.apparmor_restrict_unprivileged_userns=0) and Linux 5.14 or later, which counts the "
    "process limit per user namespace. Grade as root, ask the host to allow these, "
    "or pass --no-sandbox when grading code you trust."
)

# Each live kernel in root mode gets a uid of its own, so that an rlimit on processes in one kernel
# (which Linux counts per uid) cannot starve another kernel of threads. A uid is leased with a lock
# file, so that two grader processes on one machine (a CLI batch and a service worker, say) never
# share one. The lock folder is fixed (not $TMPDIR), so every grader on the machine sees the same one.
_UID_BASE = 61000
_UID_COUNT = 2000
_LOCK_DIR = Path("/run/lock/course-kernel-uids") if Path("/run/lock").is_dir() else Path("/tmp/course-kernel-uids")
_uid_counter = itertools.count()
_uid_lock = threading.Lock()

# The user-namespace mode relies on RLIMIT_NPROC being counted per user namespace (ucounts).
_MIN_KERNEL = (5, 14)
# How often the memory watcher samples a sandbox's process tree. A submission can exceed its memory
# cap by what it allocates between two samples before it is killed (see docs/security.md).
WATCH_INTERVAL_S = 0.01
_CGROUP_PREFIX = "course-kernel-"


class UidLease:
    """An exclusive claim on one sandbox uid, held until ``release`` (or the process ends)."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd: int | None = fd

    @classmethod
    def acquire(cls) -> UidLease:
        with _uid_lock:
            start = next(_uid_counter) + os.getpid()
        for offset in range(_UID_COUNT):
            lease = cls.try_acquire(_UID_BASE + (start + offset) % _UID_COUNT)
            if lease is not None:
                return lease
        raise CourseError(f"all {_UID_COUNT} sandbox uids from {_UID_BASE} are in use; grade fewer at once")

    @classmethod
    def try_acquire(cls, uid: int) -> UidLease | None:
        """The lease on ``uid`` if no one holds it, else None."""
        if not _LOCK_DIR.is_dir():
            _LOCK_DIR.mkdir(exist_ok=True)
            os.chmod(_LOCK_DIR, 0o755)  # only root leases uids; nobody else may create or hold a lock
        info = _LOCK_DIR.stat()
        if info.st_uid != 0 or info.st_mode & 0o022:
            raise CourseError(
                f"{_LOCK_DIR} must belong to root and be writable by root only (it holds the sandbox uid "
                "leases); remove it and grade again"
            )
        try:
            # Read-only is enough for flock, so a lock file another user created still works.
            fd = os.open(_LOCK_DIR / str(uid), os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return cls(uid, fd)

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


# --- system calls a kernel is refused ---------------------------------------------------------
# Each of these either holds memory that no process's resident set shows (so the user mode's memory
# watcher cannot see it, and it outlives the process that made it), or draws on a quota Linux keeps
# per uid across user namespaces (so in user mode a kernel could use up the grader's own), or only
# widens the attack surface of the host kernel. Grading needs none of them.
DENIED_SYSCALLS = (
    "memfd_create",  # anonymous shmem: gigabytes outside RSS, 16 MB (RLIMIT_FSIZE) per descriptor
    "memfd_secret",
    "shmget",  # SysV shared memory stays allocated after shmdt, in no process's RSS
    "add_key",  # the keyring quota (kernel.keys.maxkeys) is per uid, shared with the grader in user mode
    "request_key",
    "keyctl",
    "inotify_init",  # inotify instances (fs.inotify.max_user_instances) are counted per uid
    "inotify_init1",
    "fanotify_init",
    "ptrace",  # in user mode the sandbox's pid 1 (bwrap, without our rlimits) has the kernel's uid
    "process_vm_writev",
    "pidfd_getfd",
    "userfaultfd",
    "io_uring_setup",
    "perf_event_open",
    "bpf",
)
_SECCOMP_LIB = "libseccomp.so.2"
NOFILE = 128  # open descriptors per kernel process (RLIMIT_NOFILE); a kernel uses about 60
SECCOMP_HINT = (
    "the sandbox refuses some system calls to student code with a seccomp filter, built with "
    "libseccomp, which was not found. Install it with `apt-get install libseccomp2`, "
    "or pass --no-sandbox when grading code you trust."
)


_CLONE_NEWUSER = 0x10000000
_SCMP_CMP_MASKED_EQ = 7


class _ArgCmp(ctypes.Structure):
    """libseccomp's ``struct scmp_arg_cmp``: a test on one argument of a system call."""

    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


@lru_cache(maxsize=1)
def seccomp_filter() -> bytes:
    """The BPF program (for ``bwrap --seccomp FD``) that makes every ``DENIED_SYSCALLS`` fail with EPERM.

    Built with libseccomp through ctypes, for this machine's architecture. Raises CourseError
    when libseccomp is missing: the user mode's memory cap does not hold without the filter."""
    import tempfile

    try:
        lib = ctypes.CDLL(_SECCOMP_LIB, use_errno=True)
    except OSError:
        raise CourseError(SECCOMP_HINT) from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SCMP_ACT_ALLOW, SCMP_ACT_ERRNO(EPERM)
    enosys = 0x00050000 | 38  # SCMP_ACT_ERRNO(ENOSYS): glibc then falls back from clone3 to clone
    ctx = lib.seccomp_init(allow)
    if not ctx:
        raise CourseError(SECCOMP_HINT)
    try:
        for name in DENIED_SYSCALLS:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number >= 0 and lib.seccomp_rule_add(ctx, deny, number, 0) != 0:
                raise CourseError(f"libseccomp refused a rule for {name}")
        # No new user namespace: inside one, a root-mode kernel would be root again, free to mount a
        # tmpfs of any size. clone3 passes its flags in memory a filter cannot read, so it is refused
        # as missing, which makes glibc use clone, whose flags the filter does read.
        new_user = _ArgCmp(0, _SCMP_CMP_MASKED_EQ, _CLONE_NEWUSER, _CLONE_NEWUSER)
        for name, action, args in (("unshare", deny, [new_user]), ("clone", deny, [new_user]), ("clone3", enosys, [])):
            number = lib.seccomp_syscall_resolve_name(name.encode())
            array = (_ArgCmp * max(len(args), 1))(*args)
            if number >= 0 and lib.seccomp_rule_add_array(ctx, action, number, len(args), array) != 0:
                raise CourseError(f"libseccomp refused a rule for {name}")
        with tempfile.TemporaryFile() as out:
            if lib.seccomp_export_bpf(ctx, out.fileno()) != 0:
                raise CourseError("libseccomp could not export the sandbox's seccomp filter")
            out.seek(0)
            return out.read()
    finally:
        lib.seccomp_release(ctx)


# --- cgroup v1 (root mode) -------------------------------------------------------------------
def _own_cgroup(controller: str) -> Path | None:
    """This process's cgroup folder for a v1 ``controller``, if that hierarchy is mounted."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            folder = Path("/sys/fs/cgroup", controller, path.lstrip("/"))
            return folder if folder.is_dir() else None
    return None


_SECCOMP_FD = 9  # the descriptor bwrap reads the filter from
_seccomp_memfd: tuple[int, int] | None = None  # (pid, fd) of the memfd holding the filter
_seccomp_lock = threading.Lock()


def _seccomp_path() -> str:
    """A path the launcher shell can open to read ``seccomp_filter()``: this process's memfd.

    A memfd leaves no file on the host, and vanishes with the grader whatever way it ends."""
    global _seccomp_memfd
    with _seccomp_lock:
        if _seccomp_memfd is None or _seccomp_memfd[0] != os.getpid():
            fd = _seccomp_memfd[1] if _seccomp_memfd is not None else None
            if fd is None or not os.path.exists(f"/proc/self/fd/{fd}"):  # a forked child inherits it
                fd = os.memfd_create("course-seccomp")
                os.write(fd, seccomp_filter())
            _seccomp_memfd = (os.getpid(), fd)
        return f"/proc/{_seccomp_memfd[0]}/fd/{_seccomp_memfd[1]}"


class CgroupV1:
    """A submission's own memory and pids cgroups, made before its kernel starts, removed after.

    They are made under the grader's own cgroups, so whatever caps the grader also caps them.
    Their names carry the leased uid, which no other live kernel on the machine holds."""

    def __init__(self, name: str, limits: Limits) -> None:
        memory, pids = _own_cgroup("memory"), _own_cgroup("pids")
        if memory is None or pids is None:
            raise OSError("no cgroup v1 memory and pids hierarchy")
        self.memory, self.pids = memory / name, pids / name
        for folder in (self.memory, self.pids):
            if folder.exists():  # left by a grader that crashed while holding this uid
                _empty_and_remove(folder)
            folder.mkdir()
        cap = limits.memory_mb * 1024 * 1024
        (self.memory / "memory.limit_in_bytes").write_text(str(cap))
        swap = self.memory / "memory.memsw.limit_in_bytes"
        if swap.exists():  # memory + swap: no way round the cap through swap
            swap.write_text(str(cap))
        (self.pids / "pids.max").write_text(str(limits.max_processes))

    def procs_files(self) -> list[str]:
        return [str(self.memory / "cgroup.procs"), str(self.pids / "cgroup.procs")]

    def peak_memory_bytes(self) -> int:
        return int((self.memory / "memory.max_usage_in_bytes").read_text())

    def remove(self) -> None:
        for folder in (self.memory, self.pids):
            _empty_and_remove(folder)


def _empty_and_remove(folder: Path, timeout: float = 10.0) -> None:
    """Kill every process left in a cgroup, then remove it once the kernel has reaped them."""
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while folder.exists():
        try:
            pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # busy: killed processes not reaped yet
            if time.monotonic() > deadline:
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.02)


def _cgroups_writable() -> bool:
    """Whether this process may make cgroups that cap memory and processes (tried, not guessed)."""
    try:
        probe = CgroupV1(f"{_CGROUP_PREFIX}probe-{os.getpid()}", Limits())
    except OSError:
        return False
    probe.remove()
    _remove_stale_cgroups()
    return True


def _remove_stale_cgroups() -> None:
    """Remove cgroups a crashed grader left behind: those whose uid no live grader holds."""
    for controller in ("memory", "pids"):
        own = _own_cgroup(controller)
        for folder in own.glob(f"{_CGROUP_PREFIX}*") if own is not None else []:
            suffix = folder.name.removeprefix(_CGROUP_PREFIX)
            if not suffix.isdigit():
                continue
            lease = UidLease.try_acquire(int(suffix))
            if lease is not None:  # held while removing, so no new kernel of that uid races us
                _empty_and_remove(folder)
                lease.release()


# --- mode ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mode:
    """How sandboxes isolate on this machine, found once per process."""

    root: bool  # root mode (leased uids); otherwise user-namespace mode
    cgroups: bool  # per-submission cgroups (root mode on a writable cgroup v1 hierarchy)

    def describe(self) -> str:
        if self.root and self.cgroups:
            return "root mode (leased uid per kernel, cgroup v1 memory+pids per submission)"
        if self.root:
            return (
                "root mode (leased uid per kernel; no writable cgroup v1 hierarchy, so memory is watched "
                "per submission and processes are limited per uid)"
            )
        return (
            "user-namespace mode (own user namespace per kernel with a process limit of its own, "
            "memory watched per submission)"
        )


def _kernel_version() -> tuple[int, int]:
    parts = platform.release().split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


@lru_cache(maxsize=1)
def detect_mode() -> Mode:
    """Root mode for root, user-namespace mode otherwise; refuses where neither can isolate."""
    if shutil.which("bwrap") is None:
        raise CourseError(INSTALL_HINT)
    if os.geteuid() == 0:
        return Mode(root=True, cgroups=_cgroups_writable())
    if _kernel_version() < _MIN_KERNEL:
        raise CourseError(f"Linux {platform.release()} counts processes per uid only: {USERNS_HINT}")
    return Mode(root=False, cgroups=False)


# --- memory watcher (no cgroup) --------------------------------------------------------------
def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (a process forked from any thread counts)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(c) for c in fh.read().split())
        except OSError:
            pass
    return out


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree(root: int) -> list[int]:
    """``root`` and all its descendants (a process that has exited is skipped)."""
    out, stack, seen = [], [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        out.append(pid)
        stack.extend(_children(pid))
    return out


def tree_rss_bytes(root: int) -> int:
    """Resident memory of ``root`` and its descendants, summed: cheap, but a page shared after a
    fork counts once per process, so it can only overstate what the tree holds."""
    total = 0
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


def tree_pss_bytes(root: int) -> int:
    """Proportional set size of ``root`` and its descendants: a page shared by n processes counts 1/n
    in each, so the sum is what the tree really holds. Costlier than RSS (the kernel walks the page
    tables), so the watcher asks for it only when the RSS sum is over the cap."""
    total = 0
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, IndexError, ValueError):
            continue
    return total


class _Watcher:
    """One thread per grader process that samples every watched sandbox and kills any over its cap.

    A sandbox's processes all descend from its pid 1 (orphans are re-parented to it inside its PID
    namespace), so summing the tree below that pid covers the whole submission."""

    def __init__(self) -> None:
        self._sandboxes: set[Sandbox] = set()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, sandbox: Sandbox) -> None:
        with self._cond:
            self._sandboxes.add(sandbox)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="course-memory-watcher", daemon=True)
                self._thread.start()
            self._cond.notify()

    def remove(self, sandbox: Sandbox) -> None:
        with self._cond:
            self._sandboxes.discard(sandbox)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._sandboxes:
                    self._cond.wait()
                watched = list(self._sandboxes)
            for sandbox in watched:
                try:
                    sandbox.sample()
                except Exception:  # noqa: BLE001 - one odd sandbox must not stop the watching of all
                    sandbox.kill()
            time.sleep(WATCH_INTERVAL_S)


_WATCHER = _Watcher()


# --- what every bwrap sandbox shares (a kernel's, and the zygote's) --------------------------
# The kernel's environment: nothing of the grader's; BLAS and OpenMP on one thread (limits count
# processes and memory, and a pool per kernel would only compete); two malloc arenas, since glibc
# otherwise reserves 64 MB of address space per thread and RLIMIT_AS counts it.
KERNEL_ENV = {
    "HOME": "/tmp",
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "IPYTHONDIR": "/tmp/.ipython",
    "MPLBACKEND": "Agg",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",
    "PYTHONDONTWRITEBYTECODE": "1",
    "JUPYTER_PLATFORM_DIRS": "1",
    "JUPYTER_RUNTIME_DIR": "/tmp/.jupyter",
}


def kernel_env_args() -> list[str]:
    """bwrap arguments that clear the environment and set ``KERNEL_ENV``."""
    args = ["--clearenv"]
    for key, value in KERNEL_ENV.items():
        args += ["--setenv", key, value]
    return args


def bwrap_layout(tmp_bytes: int) -> list[str]:
    """New ipc, pid, net, uts and cgroup namespaces, /usr read-only with the usual symlinks, a fresh
    /proc and /dev, and a world-writable /tmp tmpfs of ``tmp_bytes``: the part every sandbox shares."""
    return [
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
        str(tmp_bytes),
        "--tmpfs",
        "/tmp",
    ]


def runtime_binds(extra_dirs: Sequence[str | Path] = ()) -> list[str]:
    """Read-only binds of the Python runtime outside /usr (a venv, pyenv), with the folders above
    them made first; ``extra_dirs`` are further paths whose parents must exist."""
    runtime = [p for p in _runtime_paths() if not str(p).startswith("/usr/")]
    args: list[str] = []
    for parent in _parents([*runtime, *(Path(d) for d in extra_dirs)]):
        args += ["--perms", "0755", "--dir", str(parent)]
    for path in runtime:
        args += ["--ro-bind", str(path), str(path)]
    return args


# --- one sandbox per submission --------------------------------------------------------------
class Sandbox:
    """One submission's sandbox: identity, limits, the command that starts it, and its removal.

    Make it, put ``command(...)`` in front of the kernel's argv, call ``attach(pid)`` once the
    command runs, and ``close()`` when the submission is done (kills what is left, frees the uid
    and removes the cgroups)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.mode = detect_mode()
        self.lease = UidLease.acquire() if self.mode.root else None
        # Where the kernel's sockets live inside the sandbox: its own /tmp, under a name nobody can
        # guess, so a socket planted in the host's /tmp can never stand in for it.
        self.inside_dir = f"/tmp/.course-ipc-{secrets.token_hex(8)}"
        self.cgroup: CgroupV1 | None = None
        self.pid1: int | None = None
        self._pidfd: int | None = None  # signals go through it, so a reused pid is never hit
        self.peak_bytes = 0
        self.memory_exceeded = False
        try:
            if self.mode.cgroups and self.lease is not None:
                self.cgroup = CgroupV1(f"{_CGROUP_PREFIX}{self.lease.uid}", limits)
        except OSError:
            self.close()
            raise

    @property
    def memory_cap_bytes(self) -> int:
        return self.limits.memory_mb * 1024 * 1024

    def command(self, connection_file: Path, kernel_argv: list[str]) -> list[str]:
        """bwrap (+ cgroup entry, uid switch) + prlimit, followed by ``kernel_argv``.

        ``connection_file`` is bound read-only at ``inside_dir/kernel.json``."""
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise CourseError(INSTALL_HINT)
        limits = self.limits
        cmd = [bwrap]
        if not self.mode.root:
            cmd += ["--unshare-user", "--disable-userns"]
        cmd += bwrap_layout(tmp_bytes=limits.file_size_mb * 4 * 1024 * 1024)
        cmd += ["--perms", "0777", "--dir", self.inside_dir]
        cmd += ["--ro-bind", str(connection_file), f"{self.inside_dir}/kernel.json"]
        cmd += runtime_binds()
        # Nothing but /tmp stays writable: in user mode the kernel owns the root and /dev tmpfs that
        # bwrap makes, which have no size cap and whose pages are in no process's resident set.
        cmd += ["--remount-ro", "/dev", "--remount-ro", "/"]
        cmd += ["--seccomp", str(_SECCOMP_FD), "--chdir", "/tmp", *kernel_env_args()]
        cmd += ["--"]
        if self.lease is not None:
            uid = self.lease.uid
            cmd += [
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
            f"--as={self.memory_cap_bytes}",
            f"--nproc={limits.max_processes}",
            # Socket and pipe buffers are in no resident set: in user mode, descriptors are what bound
            # them.
            f"--nofile={NOFILE}",
            f"--fsize={limits.file_size_mb * 1024 * 1024}",
            f"--cpu={limits.cpu_seconds}",
            "--core=0",
            "--",
            *kernel_argv,
        ]
        # A shell opens the seccomp filter for bwrap (from this process's memfd, so no file is left on
        # the host) and, with cgroups, enters them before bwrap forks anything, so that no process of
        # the sandbox is ever outside them.
        script = "b=$1; shift; "
        cgroup_files: list[str] = []
        if self.cgroup is not None:
            cgroup_files = self.cgroup.procs_files()
            script += 'for f in "$1" "$2"; do echo $$ > "$f" || exit 125; done; shift 2; '
        script += f'exec "$@" {_SECCOMP_FD}<"$b"'
        return ["/bin/sh", "-c", script, "course-kernel", _seccomp_path(), *cgroup_files, *cmd]

    def attach(self, launcher_pid: int, timeout: float = 30.0) -> None:
        """Find the sandbox's pid 1 (bwrap's child) and start watching its memory if no cgroup does."""
        deadline = time.monotonic() + timeout
        delay = 0.0002
        while self.pid1 is None:
            kids = _children(launcher_pid)
            if kids:
                try:
                    self._pidfd = os.pidfd_open(kids[0])
                except ProcessLookupError:
                    raise CourseError("the sandbox did not start") from None
                self.pid1 = kids[0]
                break
            if not Path(f"/proc/{launcher_pid}").exists() or time.monotonic() > deadline:
                raise CourseError("the sandbox did not start")
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
        if self.cgroup is None:
            _WATCHER.add(self)

    def adopt(self, pid1: int) -> None:
        """Take ``pid1``, started some other way (forked from a zygote), as this sandbox's pid 1:
        ``kill``, the memory watcher and ``peak_memory_bytes`` then cover it."""
        self._pidfd = os.pidfd_open(pid1)
        self.pid1 = pid1
        if self.cgroup is None:
            _WATCHER.add(self)

    def host_path(self, inside: str) -> str:
        """A path inside the sandbox as the grader reaches it, through the sandbox's root."""
        assert self.pid1 is not None
        return f"/proc/{self.pid1}/root{inside}"

    def sample(self) -> None:
        """One look at the submission's memory (the watcher calls this); kill it over the cap."""
        pid1 = self.pid1
        if pid1 is None:
            return
        used = tree_rss_bytes(pid1)
        if used > self.memory_cap_bytes:  # forked children share pages: count them once before judging
            used = tree_pss_bytes(pid1)
        self.peak_bytes = max(self.peak_bytes, used)
        if used > self.memory_cap_bytes:
            self.memory_exceeded = True
            self.kill()

    def kill(self) -> None:
        """Kill every process of the sandbox: its pid 1 takes its whole PID namespace with it."""
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except OSError:  # already gone
                pass

    def peak_memory_bytes(self) -> int:
        """The most memory the submission held at once: the cgroup's record, else the watcher's."""
        if self.cgroup is not None:
            try:
                return self.cgroup.peak_memory_bytes()
            except OSError:
                pass
        return self.peak_bytes

    def close(self) -> None:
        _WATCHER.remove(self)
        self.kill()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if self.cgroup is not None:
            self.peak_bytes = self.peak_memory_bytes()
            self.cgroup.remove()
            self.cgroup = None
        if self.lease is not None:  # the sandbox is gone, so its uid is free again
            self.lease.release()
            self.lease = None


def check_available() -> str:
    """Check that a trivial sandbox starts here; print and return the mode's one-line description.

    Raises CourseError naming what the host must install or allow when no sandbox can isolate."""
    import tempfile

    mode = detect_mode()
    with tempfile.TemporaryDirectory() as tmp:
        conn = Path(tmp) / "kernel.json"
        conn.write_text("{}")
        sandbox = Sandbox(Limits())
        try:
            cmd = sandbox.command(conn, [sys.executable, "-c", "pass"])
            proc = subprocess.run(cmd, capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            raise CourseError(INSTALL_HINT) from None
        finally:
            sandbox.close()
        if proc.returncode != 0:
            detail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
            hint = INSTALL_HINT if mode.root else USERNS_HINT
            raise CourseError(f"{hint} (bwrap said: {detail[0]})")
    line = f"sandbox: {mode.describe()}"
    print(line, file=sys.stderr)
    return line
