"""The zygote: a process inside the sandbox that imports ipykernel and numpy once, then forks one
kernel per submission.

Starting a kernel costs about 0.36 CPU s, two thirds of it imports. The zygote pays them once per
grading worker; each submission then gets a fork that is already warm. The grader side (the pool,
the jupyter_client provisioner) is in ``grader.provisioner``; this file is what runs *inside* the
sandbox, as a standalone script (``python -I zygote.py FD``). It imports nothing from ``grader``:
the sandbox sees neither the course repo nor ``solutions/``, only this one file, bound read-only.

Why the zygote holds no secrets: it starts before any submission is read and its protocol carries
only a socket per child. A child's identity, limits and connection key go straight from the grader
to the child over that socket, after the fork, so the zygote never sees them either.

Process tree of one submission (all inside the zygote's sandbox)::

    keeper  (sandbox's main process: lives until the pool closes, so in-flight kernels outlive a zygote)
    └ zygote   (imports done, one thread, no zmq context; forks on request)
      └ A      (unshares namespaces, forks B, exits)
        B      (pid 1 of a new pid namespace: mounts and limits; then keeps its uid, drops every
        │       capability and only reaps)
        └ C    (the kernel: drops to the submission's uid, then IPKernelApp on unix sockets in its
                own tmpfs)

Protocol. ``FD`` is a SOCK_SEQPACKET socket to the grader. For each kernel the grader sends one
``spawn`` message with a fresh socket (SCM_RIGHTS) and whether to make a user namespace. On that
child socket, B sends ``init`` (the grader reads B's host pid from SCM_CREDENTIALS and may move it
into cgroups), the grader answers with the child's setup (uid, gid, rlimits, tmpfs sizes,
connection info), and C sends ``ready`` once its sockets are bound (again with its host pid). B
keeps the socket open for as long as the kernel lives, so its end tells the grader when it is gone.
"""

from __future__ import annotations

import array
import base64
import ctypes
import json
import os
import resource
import signal
import socket
import sys
from typing import Any

KERNEL_DIR = "/tmp/.kernel"  # in the child's own tmpfs; the grader reaches it through /proc/PID/root
MSG_MAX = 64 * 1024

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger")
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 4, 24, 38
RLIMITS = {
    "as": resource.RLIMIT_AS,
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "cpu": resource.RLIMIT_CPU,
    "core": resource.RLIMIT_CORE,
    "nofile": resource.RLIMIT_NOFILE,
}
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    """unshare(2); Python 3.11 has no os.unshare."""
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2) through libc."""
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_seccomp(program: bytes) -> None:
    """Install a compiled BPF system-call filter (an array of 8-byte sock_filter entries), the one
    bwrap gives a kernel it starts; needs no_new_privs, which ``drop_privileges`` has set."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "prctl seccomp")


def clear_capabilities() -> None:
    """Empty the effective, permitted and inheritable sets (capset(2), version 3 header)."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.capset(header, data), "capset")


def drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` with no capability left, none in the bounding set, and no way back
    (no_new_privs: a setuid binary or file capability grants nothing on exec)."""
    try:
        last = int(open("/proc/sys/kernel/cap_last_cap").read())
    except OSError:
        last = 63
    for cap in range(last + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError:  # not held in a user namespace, or unknown to this kernel
            pass
    try:
        os.setgroups([])
    except OSError:  # a user namespace with setgroups denied has none to drop
        pass
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    clear_capabilities()
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.send(data)


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors that came with it; (None, []) at end of stream."""
    fds = array.array("i")
    data, ancdata, _flags, _addr = sock.recvmsg(MSG_MAX, socket.CMSG_SPACE(16 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if not data:
        return None, list(fds)
    return json.loads(data), list(fds)


def _close_other_fds(keep: int) -> None:
    """Leave only stdio and ``keep`` open: a child must not hold the zygote's control socket."""
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)


def _user_namespace(uid: int, gid: int) -> None:
    """Enter a new user namespace where ``uid``/``gid`` are this process's own ids outside.

    Used where the grader is not root (``new_userns``): the only mapping an unprivileged process may
    write is its own id, and the new namespace gives it what it needs to mount its own tmpfs and
    proc inside. A child's user namespace also gives it its own process count (RLIMIT_NPROC is
    counted per user namespace and uid)."""
    outer_uid, outer_gid = os.geteuid(), os.getegid()
    unshare(CLONE_NEWUSER)
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {outer_uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {outer_gid} 1")


def _setup_mounts(setup: dict[str, Any]) -> None:
    """A private mount tree: fresh tmpfs on /tmp and /dev/shm, a proc of the child's own pid
    namespace, and the folder for the kernel's sockets, owned by the submission's uid."""
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    # The Python runtime may live under /tmp (a checkout there, with its venv): the zygote's sandbox
    # binds it in read-only. Keep a handle on the old /tmp, and bind its entries into the new tmpfs.
    old_tmp = os.open("/tmp", os.O_PATH | os.O_DIRECTORY)
    kept = os.listdir(f"/proc/self/fd/{old_tmp}")
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(setup['tmp_bytes'])},mode=1777")
    for name in kept:
        source, target = f"/proc/self/fd/{old_tmp}/{name}", f"/tmp/{name}"
        if os.path.isdir(source):
            os.mkdir(target)
        else:
            open(target, "w").close()
        mount(source, target, None, MS_BIND | MS_REC)
        mount(target, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.close(old_tmp)
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(setup['shm_bytes'])},mode=1777")
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for path in filter(os.path.exists, PROC_READ_ONLY):  # as bwrap does: init keeps uid 0
        mount(path, path, None, MS_BIND)
        mount(path, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.mkdir(KERNEL_DIR, 0o700)
    os.chown(KERNEL_DIR, int(setup["uid"]), int(setup["gid"]))


def _set_limits(rlimits: dict[str, int]) -> None:
    for name, value in rlimits.items():
        resource.setrlimit(RLIMITS[name], (int(value), int(value)))


def _run_kernel(sock: socket.socket, connection: dict[str, Any]) -> None:
    """Process C: write the connection file in its tmpfs, bind the sockets, say ready, serve."""
    import numpy
    from ipykernel.kernelapp import IPKernelApp
    from traitlets.config import Config

    prctl(PR_SET_DUMPABLE, 1)  # its own /proc entries readable by its own code, as in any kernel
    numpy.random.seed()  # else every kernel repeats the zygote's stream (``random`` reseeds itself)
    path = os.path.join(KERNEL_DIR, "kernel.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(connection, f)
    config = Config()
    config.IPKernelApp.connection_file = path
    config.HistoryManager.enabled = False  # no sqlite file, no saving thread: grading has no use for it
    app = IPKernelApp.instance(config=config)
    app.initialize([])
    send(sock, {"step": "ready"})
    sock.close()
    app.start()


def _init_process(sock: socket.socket) -> None:
    """Process B, pid 1 of the child's pid namespace: set up, fork the kernel, reap until it exits."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # pid 1 ignores what it does not handle
    try:
        send(sock, {"step": "init"})
        setup, _ = receive(sock)
        if setup is None:
            os._exit(0)  # the grader gave up on this kernel
        _setup_mounts(setup)
        _set_limits(setup["rlimits"])
    except Exception as exc:  # noqa: BLE001 - reported to the grader, which refuses the kernel
        send(sock, {"step": "error", "detail": f"{type(exc).__name__}: {exc}"})
        os._exit(1)
    kernel = os.fork()
    if kernel == 0:
        try:
            drop_privileges(int(setup["uid"]), int(setup["gid"]))
            load_seccomp(base64.b64decode(setup["seccomp"]))
            os.chdir("/tmp")
            _run_kernel(sock, setup["connection"])
        except BaseException as exc:  # noqa: BLE001 - reported to the grader
            send(sock, {"step": "error", "detail": f"{type(exc).__name__}: {exc}"})
        finally:
            os._exit(1)
    # B keeps its uid (so the kernel's uid may not signal it: a kill of its parent fails with
    # EPERM, as in a kernel started by bwrap) but no capability, and cannot be ptraced (which
    # matters where it shares the kernel's uid, in a user namespace). It only reaps from here on.
    drop_privileges(os.getuid(), os.getgid())
    prctl(PR_SET_DUMPABLE, 0)
    while True:  # B keeps ``sock`` open: its end closes when the whole namespace is gone
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == kernel:
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _child(fd: int, userns: bool) -> None:
    """Process A: new namespaces, then B as pid 1 of the new pid namespace."""
    _close_other_fds(fd)
    sock = socket.socket(fileno=fd)
    try:
        flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET
        if userns:
            _user_namespace(os.geteuid(), os.getegid())
        unshare(flags)
        if os.fork() == 0:
            _init_process(sock)
    except Exception as exc:  # noqa: BLE001 - reported to the grader
        send(sock, {"step": "error", "detail": f"{type(exc).__name__}: {exc}"})
    os._exit(0)


def serve(control: socket.socket) -> None:
    """The zygote's loop: one fork per ``spawn`` message, until the grader closes the socket."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children (A) exit at once; never leave zombies
    while True:
        message, fds = receive(control)
        if message is None:
            return
        if message.get("step") != "spawn" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            continue
        if os.fork() == 0:
            _child(fds[0], bool(message.get("userns")))
        os.close(fds[0])


def preload() -> None:
    """Import what every kernel needs, without starting a thread or a zmq context.

    The debugger is made unimportable: graded kernels have no use for it and it is 18% of a
    kernel's start-up."""
    sys.modules["debugpy"] = None  # type: ignore[assignment]
    import ipykernel.ipkernel  # noqa: F401
    import ipykernel.kernelapp  # noqa: F401
    import numpy.random  # noqa: F401 - lazily imported by numpy 2, so made explicit


def _quiet() -> None:
    """Point stdout and stderr at /dev/null. The grader's stderr pipe is read only if the zygote
    fails to start; kept open in every child, one kernel could fill it and block its siblings."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


def main(argv: list[str]) -> None:
    control = socket.socket(fileno=int(argv[1]))
    if os.fork() != 0:
        # The keeper: it holds the sandbox open so that kernels already forked outlive a zygote
        # that died. It keeps no socket, so the grader sees the zygote's death as end of stream.
        control.close()
        _quiet()
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        while True:
            signal.pause()
    preload()  # an import error here reaches the grader on stderr
    _quiet()
    send(control, {"step": "hello", "threads": len(os.listdir("/proc/self/task"))})
    serve(control)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
