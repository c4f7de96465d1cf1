"""Pre-forked kernels, grader side: a pool that keeps one zygote per grading worker, and a
jupyter_client provisioner that gets each kernel from it, so that nbclient drives these kernels
like any other.

The zygote (``grader/zygote.py``) runs inside a bubblewrap sandbox of its own: no network, no view
of the course repo, ``solutions/`` or any submission, and no writable host path at all. It keeps
only the capabilities it needs to set a child up (mount, setuid, drop the bounding set) and holds no
secrets. Each child it forks gets new pid, mount, ipc, uts and network namespaces, a uid and limits
that the grader hands it (``Identity``, ``ChildLimits``), fresh tmpfs on ``/tmp`` and ``/dev/shm``,
and its kernel's unix sockets inside that tmpfs, which the grader reaches through
``/proc/PID/root``. Nothing a child writes touches the host, and all of it vanishes with the child.

If a zygote dies, the pool notices on the next request (its socket is at end of stream), starts a
new one and retries; kernels already forked live on, because the sandbox's keeper process keeps
their sandbox open until the pool closes.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import KernelProvisionerBase

from . import zygote as zygote_script
from .course import Limits
from .errors import CourseError
from .sandbox import NOFILE, bwrap_layout, kernel_env_args, runtime_binds, seccomp_filter

ZYGOTE_FILE = Path(zygote_script.__file__).resolve()
ZYGOTE_FILE_IN_SANDBOX = Path("/run/course/zygote.py")  # the only file of the repo it sees
ZYGOTE_START_S = 60.0  # imports of a cold zygote on a loaded 2-core machine
CHILD_START_S = 30.0  # from the fork request to the kernel's bound sockets
PORTS = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5}
# What the zygote may do to set a child up; every other capability is dropped by bwrap.
ZYGOTE_CAPS = ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_CHOWN")


class ZygoteError(CourseError):
    """A pre-forked kernel could not be started."""


@dataclass(frozen=True)
class Identity:
    """Who a child runs as. Root mode: a uid leased from ``grader.sandbox.UidLease`` (gid = uid).
    User-namespace mode (``new_userns``): the ids the unprivileged sandbox gives, inside a user
    namespace of the child's own. ``cgroups``: folders whose ``cgroup.procs`` the child joins
    before it runs anything (per-submission memory and pids limits, set up by the caller)."""

    uid: int
    gid: int
    new_userns: bool = False
    cgroups: tuple[Path, ...] = ()


@dataclass(frozen=True)
class ChildLimits:
    """The per-process limits a child sets on itself, and the size of its tmpfs."""

    memory_bytes: int
    processes: int
    file_bytes: int
    cpu_seconds: int
    tmp_bytes: int

    @classmethod
    def from_limits(cls, limits: Limits) -> ChildLimits:
        """The same figures as the one-kernel-per-submission sandbox (docs/security.md)."""
        mib = 1024 * 1024
        return cls(
            memory_bytes=limits.memory_mb * mib,
            processes=limits.max_processes,
            file_bytes=limits.file_size_mb * mib,
            cpu_seconds=limits.cpu_seconds,
            tmp_bytes=limits.file_size_mb * 4 * mib,
        )

    def rlimits(self) -> dict[str, int]:
        return {
            "as": self.memory_bytes,
            "nproc": self.processes,
            "fsize": self.file_bytes,
            "cpu": self.cpu_seconds,
            "core": 0,
            "nofile": NOFILE,
        }


def _receive(sock: socket.socket, timeout: float) -> tuple[dict[str, Any] | None, int | None]:
    """One message from a child and the host pid of its sender (SCM_CREDENTIALS, translated into
    our pid namespace by the kernel, so a child cannot lie about it). (None, None) at end of
    stream; ZygoteError on timeout."""
    ready, _, _ = select.select([sock], [], [], timeout)
    if not ready:
        raise ZygoteError(f"no answer from a forked kernel within {timeout:.0f} s")
    data, ancdata, _flags, _addr = sock.recvmsg(zygote_script.MSG_MAX, socket.CMSG_SPACE(12))
    pid = None
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= 4:
            pid = int.from_bytes(payload[:4], sys.byteorder, signed=True) or None  # 0: not visible
    if not data:
        return None, None
    try:
        message = json.loads(data)
    except ValueError:
        message = None
    return (message if isinstance(message, dict) else {}), pid


def _exited(pidfd: int) -> bool:
    """A pidfd is readable once its process has exited."""
    return bool(select.select([pidfd], [], [], 0)[0])


class ForkedKernel:
    """One kernel forked from a zygote, seen from the grader: its init (pid 1 of its namespace,
    whose death ends every process of the submission) and the kernel process, both by pidfd, so a
    recycled pid can never be signalled by mistake. Has the ``poll``/``kill`` of a Popen, which is
    what ``KernelSession`` uses on its deadline.

    It is handed out as soon as the child is set up, while the kernel still boots: the grader's
    zmq sockets connect (and queue) meanwhile, so a spare kernel's start costs the grader nothing.
    The kernel's own pid, needed only to interrupt it, is read from its ``ready`` message when
    first asked for."""

    def __init__(self, sock: socket.socket, init_pid: int, init_fd: int) -> None:
        self.sock = sock
        self.pid = init_pid  # host pid of the child's init
        self._init_fd: int | None = init_fd
        self._kernel_fd: int | None = None
        self._kernel_pid: int | None = None
        self.error = ""  # why the kernel failed to start, when it said so
        # The child's root folder (its mount namespace, shared by init and kernel), held open: the
        # kernel's sockets are reached through this descriptor, which keeps pointing at this child
        # even if its pid is reused after it dies.
        self._root_fd: int | None = os.open(f"/proc/{init_pid}/root", os.O_PATH | os.O_DIRECTORY)
        self.on_close: Callable[[], None] | None = None  # tells the pool this kernel is gone

    def kernel_pid(self, timeout: float = CHILD_START_S) -> int | None:
        """Host pid of the ipykernel process once it has bound its sockets; None if it never did."""
        if self._kernel_pid is None and not self.error and self._init_fd is not None:
            try:
                message, pid = _receive(self.sock, timeout)
            except ZygoteError:  # not ready yet
                return None
            except OSError:
                message, pid = None, None
            if message is not None and message.get("step") == "ready" and pid is not None:
                self._kernel_pid, self._kernel_fd = pid, os.pidfd_open(pid)
            else:
                self.error = str((message or {}).get("detail", "the kernel exited before it was ready"))
        return self._kernel_pid

    def failure(self) -> str:
        """What the child said when it failed to start, for the instructor's log."""
        self.kernel_pid(timeout=0)
        return self.error

    @property
    def socket_prefix(self) -> str:
        """The ipc ``ip`` the grader connects to (the kernel binds ``KERNEL_DIR/k-N`` inside)."""
        assert self._root_fd is not None
        return f"/proc/self/fd/{self._root_fd}{zygote_script.KERNEL_DIR}/k"

    def poll(self) -> int | None:
        """None while the kernel's init lives; then -SIGKILL (a non-child's status is unknown)."""
        if self._init_fd is None or _exited(self._init_fd):
            return -signal.SIGKILL
        return None

    def signal(self, signum: int) -> None:
        """Signal the kernel process (an interrupt, say); SIGKILL ends the whole child instead."""
        if signum != signal.SIGKILL and self.poll() is None:
            self.kernel_pid(timeout=0)  # a kernel that has not said ready runs nothing to interrupt
        target = self._init_fd if signum == signal.SIGKILL else self._kernel_fd
        if target is None:
            return
        try:
            signal.pidfd_send_signal(target, signum)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """End every process of this submission (its pid namespace dies with its init)."""
        self.signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the child is gone; False on timeout."""
        if self._init_fd is None:
            return True
        return bool(select.select([self._init_fd], [], [], timeout)[0])

    def close(self) -> None:
        """Kill the child if it still runs and release every descriptor."""
        if self.poll() is None:
            self.kill()
            self.wait(5.0)
        for name in ("_init_fd", "_kernel_fd", "_root_fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)
        self.sock.close()
        if self.on_close is not None:
            done, self.on_close = self.on_close, None
            done()


class _Zygote:
    """One sandbox with its keeper and zygote, and the control socket to the zygote."""

    def __init__(self, argv: list[str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.control = ours
        try:
            self.process = subprocess.Popen(
                [*argv, str(ZYGOTE_FILE_IN_SANDBOX), str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,  # read if it fails to start; it points elsewhere after its hello
                start_new_session=True,
            )
        finally:
            theirs.close()
        self.pid: int | None = None  # host pid of the zygote itself, from its hello
        self._pidfd: int | None = None
        self.dead = False
        self.live_kernels = 0  # forked and not yet closed: the sandbox must stay up for them

    def wait_hello(self, timeout: float) -> None:
        try:
            message, pid = _receive(self.control, timeout)
        except ZygoteError:
            message, pid = None, None
        if message is None or message.get("step") != "hello" or pid is None:
            self.dead = True
            raise ZygoteError(f"the zygote did not start{self._stderr()}")
        if message.get("threads") != 1:  # forking a process with threads would copy a broken state
            self.dead = True
            raise ZygoteError(f"the zygote has {message.get('threads')} threads before forking; expected 1")
        self.pid, self._pidfd = pid, os.pidfd_open(pid)

    def alive(self) -> bool:
        if not self.dead and self._pidfd is not None and _exited(self._pidfd):
            self.dead = True
        return not self.dead

    def _stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        lines = self.process.stderr.read().decode(errors="replace").strip().splitlines()
        return f" ({lines[-1]})" if lines else ""

    def request(self, child_end: socket.socket, userns: bool) -> None:
        """Ask for one fork; OSError when the zygote is gone."""
        if not self.alive():
            raise BrokenPipeError("zygote gone")
        try:
            zygote_script.send(self.control, {"step": "spawn", "userns": userns}, [child_end.fileno()])
        except OSError:
            self.dead = True
            raise

    def retire(self) -> None:
        """Stop forking from this zygote (it died or hung): kill it, keep its sandbox for the
        kernels it forked until they are closed."""
        self.dead = True
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def stop(self) -> None:
        """Kill the sandbox: keeper, zygote and every kernel still in it."""
        self.dead = True
        self.control.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def zygote_argv() -> list[str]:
    """bwrap running ``python -I`` on the zygote script: the runtime read-only, no host path
    writable, private /tmp, no network, and only ``ZYGOTE_CAPS`` kept (bwrap keeps every
    capability for root unless told otherwise)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise ZygoteError("pre-forked kernels need bubblewrap (apt-get install bubblewrap)")
    cmd = [bwrap, *bwrap_layout(tmp_bytes=4 * 1024 * 1024), *runtime_binds([ZYGOTE_FILE_IN_SANDBOX])]
    cmd += ["--ro-bind", str(ZYGOTE_FILE), str(ZYGOTE_FILE_IN_SANDBOX), "--chdir", "/tmp", *kernel_env_args()]
    cmd += ["--cap-drop", "ALL"]
    for cap in ZYGOTE_CAPS:
        cmd += ["--cap-add", cap]
    return [*cmd, "--", sys.executable, "-I"]


class ZygotePool:
    """One grading worker's zygote, started on the first request and replaced when it dies.

    Thread-safe: ``spawn`` may be called from several threads, and forks are serialised on the one
    control socket. ``close`` ends the zygote and every kernel it forked."""

    def __init__(self) -> None:
        self._current: _Zygote | None = None
        self._retired: list[_Zygote] = []  # dead zygotes whose kernels still run
        self._lock = threading.Lock()
        self.restarts = 0  # zygotes started after the first, for tests and the bench

    def start(self) -> None:
        """Start the zygote now rather than on the first request (it takes about half a second)."""
        with self._lock:
            self._live()

    @property
    def zygote_pid(self) -> int | None:
        """Host pid of the current zygote process (not its sandbox), if one runs."""
        return self._current.pid if self._current is not None and self._current.alive() else None

    def _live(self) -> _Zygote:
        """The current zygote, started (or replaced) as needed. Call with the lock held."""
        if self._current is not None and not self._current.alive():
            self._retire(self._current)
            self._current = None
            self.restarts += 1
        if self._current is None:
            zygote = _Zygote(zygote_argv())
            try:
                zygote.wait_hello(ZYGOTE_START_S)
            except ZygoteError:
                zygote.stop()
                raise
            self._current = zygote
        return self._current

    def _retire(self, zygote: _Zygote) -> None:
        zygote.retire()
        if zygote.live_kernels == 0:
            zygote.stop()
        else:
            self._retired.append(zygote)

    def kernel_manager(
        self, uid: int, limits: Limits, connection_file: str, cgroups: tuple[Path, ...] = ()
    ) -> ZygoteKernelManager:
        """A kernel manager for one submission in root mode: ``uid`` leased by the caller
        (``grader.sandbox.UidLease``, gid = uid), ``limits`` the course's, ``cgroups`` the
        submission's own (joined before the child runs anything). ``connection_file`` is a path in
        a folder only the grader can read."""
        identity = Identity(uid, uid, cgroups=cgroups)
        return ZygoteKernelManager(self, identity, ChildLimits.from_limits(limits), connection_file)

    def spawn(self, identity: Identity, limits: ChildLimits, connection: dict[str, Any]) -> ForkedKernel:
        """Fork one kernel with this identity, limits and connection info (key, signature scheme,
        ports); return once it is set up (in its namespaces, cgroups and limits), while its kernel
        boots. A zygote found dead is replaced, once."""
        for attempt in range(2):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            with self._lock:
                zygote = self._live()
                try:
                    zygote.request(theirs, identity.new_userns)
                except OSError:
                    ours.close()
                    continue
                finally:
                    theirs.close()
                zygote.live_kernels += 1
            try:
                child = self._set_up(ours, identity, limits, connection, zygote)
            except _ZygoteDied:
                ours.close()
                self._forget(zygote)
                if attempt == 0:
                    continue
                raise ZygoteError("the zygote died twice in a row") from None
            except BaseException:
                ours.close()
                self._forget(zygote)
                raise
            child.on_close = lambda z=zygote: self._forget(z)
            return child
        raise ZygoteError("the zygote could not be reached")

    def _set_up(
        self,
        sock: socket.socket,
        identity: Identity,
        limits: ChildLimits,
        connection: dict[str, Any],
        zygote: _Zygote,
    ) -> ForkedKernel:
        try:
            message, init_pid = _receive(sock, CHILD_START_S)
        except ZygoteError:  # a zygote that does not fork is of no more use than a dead one
            zygote.dead = True
            raise
        if message is None:  # every copy of the child's socket closed: the zygote died holding it
            zygote.dead = True
            raise _ZygoteDied
        if message.get("step") != "init" or init_pid is None:
            raise ZygoteError(f"a forked kernel failed to start: {message.get('detail', message)}")
        init_fd = os.pidfd_open(init_pid)
        try:
            for folder in identity.cgroups:
                try:
                    (folder / "cgroup.procs").write_text(str(init_pid))
                except OSError as exc:
                    raise ZygoteError(f"cannot move a forked kernel into {folder}: {exc.strerror}") from None
            setup = {
                "uid": identity.uid,
                "gid": identity.gid,
                "rlimits": limits.rlimits(),
                "tmp_bytes": limits.tmp_bytes,
                "shm_bytes": max(limits.tmp_bytes // 4, 1024 * 1024),
                "connection": connection,
                # The same system-call filter as a kernel that bwrap starts (see sandbox.seccomp_filter).
                "seccomp": base64.b64encode(_filter()).decode(),
            }
            zygote_script.send(sock, setup)
            return ForkedKernel(sock, init_pid, init_fd)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(init_fd, signal.SIGKILL)
            os.close(init_fd)
            raise

    def _forget(self, zygote: _Zygote) -> None:
        """One kernel of ``zygote`` is gone; a retired zygote's sandbox goes with its last kernel."""
        with self._lock:
            zygote.live_kernels -= 1
            if zygote in self._retired and zygote.live_kernels == 0:
                self._retired.remove(zygote)
                zygote.stop()

    def close(self) -> None:
        with self._lock:
            for zygote in [*self._retired, *([self._current] if self._current else [])]:
                zygote.stop()
            self._retired.clear()
            self._current = None


class _ZygoteDied(Exception):
    pass


@functools.cache
def _filter() -> bytes:
    return seccomp_filter()


class ZygoteProvisioner(KernelProvisionerBase):
    """A jupyter_client provisioner whose kernels are forked from a ``ZygotePool``.

    Instantiated directly (``ZygoteKernelManager`` does it) rather than through an entry point, as
    the pool, identity and limits are per submission and not part of a kernelspec."""

    pool: ZygotePool
    identity: Identity
    limits: ChildLimits
    process: ForkedKernel | None = None

    @property
    def has_process(self) -> bool:
        return self.process is not None

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Nothing to build: the command line, environment and cwd are the zygote's."""
        return {"cmd": []}

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        km = self.parent
        assert km is not None
        connection: dict[str, Any] = {
            **PORTS,
            "transport": "ipc",
            "ip": f"{zygote_script.KERNEL_DIR}/k",
            "key": km.session.key.decode(),
            "signature_scheme": km.session.signature_scheme,
            "kernel_name": "",
        }
        self.process = self.pool.spawn(self.identity, self.limits, connection)  # a few ms: no thread
        info: KernelConnectionInfo = {
            **PORTS,  # type: ignore[typeddict-item]
            "transport": "ipc",
            "ip": self.process.socket_prefix,
            "key": km.session.key,
            "signature_scheme": km.session.signature_scheme,
        }
        self.connection_info = info
        return info

    async def poll(self) -> int | None:
        return self.process.poll() if self.process is not None else 0

    async def wait(self) -> int | None:
        if self.process is None:
            return 0
        self.process.wait()  # called once the kernel is gone (the manager polls first)
        return self.process.poll()

    async def send_signal(self, signum: int) -> None:
        if self.process is not None:
            self.process.signal(signum)

    async def kill(self, restart: bool = False) -> None:
        """Kill and wait for the end, so the manager never needs its 0.1 s polling loop."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(5.0)  # the namespace empties within milliseconds of its init's death

    async def terminate(self, restart: bool = False) -> None:
        await self.kill(restart)  # a graded kernel has nothing to save

    async def cleanup(self, restart: bool = False) -> None:
        if self.process is not None:
            self.process.close()
            self.process = None

    def get_shutdown_wait_time(self, recommended: float = 5.0) -> float:
        return 1.0


class ZygoteKernelManager(AsyncKernelManager):
    """An AsyncKernelManager whose kernel comes from a zygote, over ipc sockets in the kernel's tmpfs."""

    def __init__(
        self, pool: ZygotePool, identity: Identity, limits: ChildLimits, connection_file: str, **kwargs: Any
    ) -> None:
        super().__init__(
            kernel_name="python3",
            transport="ipc",
            connection_file=connection_file,
            client_class="grader.kernel._ReadyClient",
            **kwargs,
        )
        provisioner = ZygoteProvisioner(kernel_id=self.kernel_id or "", kernel_spec=None, parent=self)
        provisioner.pool, provisioner.identity, provisioner.limits = pool, identity, limits
        self.provisioner = provisioner

    def cleanup_ipc_files(self) -> None:
        """The sockets live in the kernel's own tmpfs and vanish with it; the path through
        /proc must never be used to delete anything."""
