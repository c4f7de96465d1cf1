"""Run a submission's exercise cells in a fresh kernel and call its functions for the hidden tests.

The kernel executes student code and nothing else. The grader asks it to call a named function and
receives the result as JSON text inside the ``execute_reply`` (a ``user_expressions`` entry), never
on stdout, and never as a pickle. Whatever the kernel sends is parsed as plain data and compared in
the grader's process, so a hostile kernel can only ever return wrong data.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import ctypes
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any

import nbformat
import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from traitlets import default

from .course import Limits
from .provisioner import ZygoteKernelManager, ZygotePool
from .sandbox import Sandbox, UidLease
from .text import clean

RESULT_LIMIT = 1_000_000  # characters of JSON a single call may return
# Largest message the grader accepts from a kernel. A result at RESULT_LIMIT fits many times over,
# and so does a careless print of some megabytes (the output caps then cut it, and grading goes on);
# a kernel that sends more is cut off and killed. With RECEIVE_QUEUE, this bounds what ZeroMQ may
# hold in the grader per socket.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
RECEIVE_QUEUE = 4  # messages ZeroMQ may hold per socket before the grader reads them
TRACEBACK_HEAD, TRACEBACK_TAIL = 2, 8  # traceback entries kept from an error output
TRACEBACK_ENTRY_CHARS = 4000
ERROR_MESSAGE_CHARS = 300  # of an exception message shown to the student
_SURROGATE = re.compile("[\ud800-\udfff]")

# Plain-data conversion, by exact type, so subclasses with hostile __eq__/__iter__/__len__ are refused
# rather than trusted. The kernel runs it on the student's results; the grader runs the same source on
# the reference solution's results (``plain_data``), so both sides of a comparison look alike.
_PLAIN_SRC = r"""
import json as _json, dataclasses as _dc, math as _math
def _plain(x, depth=0):
    if depth > 50:
        raise TypeError("nested too deeply")
    t = type(x)
    if x is None or t in (bool, int, str):
        return x
    if t is float:
        return x if _math.isfinite(x) else repr(x)
    if t in (list, tuple):
        return [_plain(v, depth + 1) for v in x]
    if t is dict:
        return {str(k) if type(k) in (str, int) else _bad(k): _plain(v, depth + 1) for k, v in x.items()}
    if _dc.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name), depth + 1) for f in _dc.fields(x)}
    mod = getattr(t, "__module__", "")
    if mod == "numpy" and (t.__name__ == "ndarray" or t.__name__.startswith(("int", "uint", "float", "bool"))):
        return _plain(x.tolist(), depth + 1)
    return _bad(x)
def _bad(x):
    raise TypeError("unsupported result type " + type(x).__name__)
def _decode(x):
    if type(x) is dict and set(x) == {"__ndarray__", "dtype"}:
        import numpy
        return numpy.array(x["__ndarray__"], dtype=x["dtype"])
    if type(x) is list:
        return [_decode(v) for v in x]
    if type(x) is dict:
        return {k: _decode(v) for k, v in x.items()}
    return x
"""

# Where an exception was raised, as the student may see it: the nearest built-in class (a class the
# student made can carry hidden inputs in its name) and the line in an exercise cell (the innermost
# frame whose file is one of the cells IPython compiled, found by execution count). A SyntaxError
# has no frame in the cell, so its own line and short message are used.
_WHERE_SRC = r"""
def __course_where__(exc, cell_run=False):
    import builtins as _builtins, json as _json, traceback as _tb
    out = {"type": "Exception", "cell": None, "line": None}
    try:
        for klass in type(exc).__mro__:
            if klass.__module__ == "builtins" and getattr(_builtins, klass.__name__, None) is klass:
                out["type"] = klass.__name__
                break
        cells = dict(getattr(get_ipython().compile, "_filename_map", {}))
        for frame, line in _tb.walk_tb(exc.__traceback__):
            if frame.f_code.co_filename in cells:
                out["cell"], out["line"] = cells[frame.f_code.co_filename], line
        if cell_run and isinstance(exc, SyntaxError) and out["line"] is None:
            out["line"], out["message"] = exc.lineno, str(exc.msg)[:500]
    except BaseException:
        pass
    return _json.dumps(out)
"""

# Defined in the kernel after the student's cells; the grader calls it through user_expressions.
_CALL_HELPER = (
    _WHERE_SRC
    + r"""
def __course_call__(name, payload):
"""
    + textwrap.indent(_PLAIN_SRC, "    ")
    + r"""
    try:
        req = _json.loads(payload)
        fn = get_ipython().user_ns.get(name)
        if fn is None or not callable(fn):
            return _json.dumps({"missing": name})
        value = fn(*_decode(req["args"]), **_decode(req["kwargs"]))
    except BaseException as exc:
        where = _json.loads(__course_where__(exc))
        return _json.dumps({"error": where["type"], "cell": where["cell"], "line": where["line"], "blank": "______" in str(exc)})
    try:
        return _json.dumps({"ok": _plain(value)})
    except BaseException:
        return _json.dumps({"unsupported": True})
"""
)

# Run after an exercise cell failed: where did its last exception come from.
_LAST_ERROR_PROBE = (
    _WHERE_SRC + "\nimport sys as _sys\n__course_last__ = __course_where__(getattr(_sys, 'last_value', None), True)\n"
)

# Names a student may see for an exception: the genuine built-in exception classes, nothing else.
BUILTIN_EXCEPTIONS = frozenset(
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
)


def plain_data(value: Any) -> Any:
    """``value`` as the kernel would hand it back: plain data after a JSON round trip.

    Raises TypeError for what the kernel would refuse as not plain data."""
    return json.loads(json.dumps(_PLAIN_NS["_plain"](value)))


def decode_args(value: Any) -> Any:
    """Arguments as the kernel receives them (``ndarray(...)`` markers become numpy arrays)."""
    return _PLAIN_NS["_decode"](json.loads(json.dumps(value)))


_PLAIN_NS: dict[str, Any] = {}
exec(compile(_PLAIN_SRC, "<course plain data>", "exec"), _PLAIN_NS)  # noqa: S102 - our own source


def _return_large_buffers_to_the_os() -> None:
    """Keep big transient buffers (a kernel's megabyte-sized messages) out of malloc's heap.

    glibc raises its mmap threshold after the first large buffer is freed, after which such buffers
    fragment the heap and the grader's memory only grows over a batch of hostile submissions. A fixed
    threshold of 1 MiB keeps every large buffer mmapped, so freeing it returns the memory at once.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


_return_large_buffers_to_the_os()


class StudentCallError(Exception):
    """A call into the student's kernel did not return a usable value."""

    def __init__(self, kind: str, function: str, detail: str = "", cell: str = "", line: int | None = None) -> None:
        self.kind = kind  # missing | error | blank | timeout | dead | bad-result
        self.function = function
        self.detail = detail  # for "error": a built-in exception name, nothing the student chose
        self.cell = cell  # for "error": the exercise cell id and line in it where it was raised, if known
        self.line = line
        super().__init__(f"{kind}: {function} {detail}".strip())


async def _settle() -> None:
    """End the tasks nbclient leaves behind when a cell times out or its kernel dies.

    nbclient cancels its output poller only for some errors (not for a timeout, a
    ``CellControlSignal``), so the poller would wait on the iopub channel until the loop is
    destroyed, and asyncio would print "Task was destroyed but it is pending!" on the grader's stderr."""
    left = [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "").startswith("NotebookClient.")]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)


@dataclass
class CellRun:
    id: str
    status: str  # ok | error | timeout | dead | skipped
    error_name: str = ""
    error_message: str = ""  # sanitised and cut; for a SyntaxError Python's short message
    error_line: int | None = None  # line within this cell
    lines: int = 0  # number of lines of the cell's source
    truncated: bool = False


@dataclass
class RunReport:
    cells: list[CellRun] = field(default_factory=list)
    submission_timed_out: bool = False


# The kernel's own entry point: ipykernel without its debugger. Marking debugpy as missing makes
# ipykernel skip the debugger (and the 18% of start-up that importing debugpy/pydevd costs); -P keeps
# the working folder off sys.path. No history database either: grading never asks for history.
KERNEL_ARGV = [
    "-P",
    "-c",
    "import sys; sys.modules['debugpy'] = None; from ipykernel.kernelapp import launch_new_instance; "
    "launch_new_instance()",
    "--HistoryManager.enabled=False",
]


class _MessageLimit:
    """Follows ZMTP 3 framing in the bytes a kernel sends, and says when one message grows too big.

    ZeroMQ reads every frame of a message into memory before the grader can look at it, and its own
    size limit (``MAXMSGSIZE``) is per frame, so a kernel could send one message of any number of
    frames. Only frame headers are parsed; bodies are skipped over."""

    GREETING = 64

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._greeting = bytearray()
        self._header = bytearray()
        self._skip = 0
        self._message = 0  # bytes of the message being received so far

    def feed(self, data: bytes) -> bool:
        """Account for ``data``; False once the stream is over the limit or not ZMTP 3."""
        i, n = 0, len(data)
        while i < n:
            if len(self._greeting) < self.GREETING:
                take = min(self.GREETING - len(self._greeting), n - i)
                self._greeting += data[i : i + take]
                i += take
                if len(self._greeting) >= 11 and not (
                    self._greeting[0] == 0xFF and self._greeting[9] == 0x7F and self._greeting[10] >= 3
                ):
                    return False  # older ZMTP framing: refuse rather than parse it differently
            elif self._skip:
                take = min(self._skip, n - i)
                self._skip -= take
                i += take
            else:
                self._header.append(data[i])
                i += 1
                flags = self._header[0]
                need = 9 if flags & 0x02 else 2  # LONG: 8-byte size, else 1 byte
                if len(self._header) < need:
                    continue
                size = int.from_bytes(self._header[1:need], "big")
                self._header.clear()
                self._skip = size
                if flags & 0x04:  # a command frame, outside any message
                    if size > self.limit:
                        return False
                    continue
                self._message += size
                if self._message > self.limit:
                    return False
                if not flags & 0x01:  # no MORE: the message is complete
                    self._message = 0
        return True


class _Relay:
    """Forwards a client's ipc connections to a kernel's, cutting off a kernel whose message is too big.

    Listens in a private folder (0700), one socket per channel; each accepted connection is joined
    to the kernel's socket by two threads, one per direction. What the kernel sends goes through a
    ``_MessageLimit``; past the limit every connection is closed and no new one is made."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.folder = Path(tempfile.mkdtemp(prefix="course-relay-"))
        self.violated = threading.Event()
        self.on_violation: Callable[[], None] | None = None  # called once, from a relay thread
        self._closed = False
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._count = itertools.count()

    def forward(self, upstream: str) -> str:
        """Start listening for connections to ``upstream``; return the path to connect to instead."""
        path = str(self.folder / f"c{next(self._count)}")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(8)
        self._track(listener)
        threading.Thread(target=self._accept, args=(listener, upstream), name="course-relay", daemon=True).start()
        return path

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                sock.close()
                return False
            self._sockets.add(sock)
            return True

    def _drop(self, *socks: socket.socket) -> None:
        with self._lock:
            for sock in socks:
                self._sockets.discard(sock)
                _shut(sock)

    def _accept(self, listener: socket.socket, upstream: str) -> None:
        while True:
            try:
                down, _ = listener.accept()
            except OSError:
                return  # closed
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            if self.violated.is_set() or not self._track(down) or not self._track(up):
                self._drop(down, up)
                continue
            try:
                up.settimeout(1.0)  # a kernel whose backlog is full must not hold this thread
                up.connect(upstream)
                up.settimeout(None)
            except OSError:  # the kernel has not bound it yet (or is gone): ZeroMQ retries soon
                self._drop(down, up)
                continue
            limit = _MessageLimit(self.limit)
            threading.Thread(target=self._pump, args=(up, down, limit), name="course-relay", daemon=True).start()
            threading.Thread(target=self._pump, args=(down, up, None), name="course-relay", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, limit: _MessageLimit | None) -> None:
        try:
            while data := src.recv(1 << 16):
                if limit is not None and not limit.feed(data):
                    self.violated.set()
                    self.close()
                    if self.on_violation is not None:
                        self.on_violation()
                    return
                dst.sendall(data)
        except OSError:
            pass
        self._drop(src, dst)

    def close(self) -> None:
        """Close every socket and remove the folder; the threads end on their own."""
        with self._lock:
            self._closed = True
            socks, self._sockets = self._sockets, set()
        for sock in socks:
            _shut(sock)
        shutil.rmtree(self.folder, ignore_errors=True)


def _shut(sock: socket.socket) -> None:
    """Close a socket so that a thread blocked on it wakes up."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class _ReadyClient(AsyncKernelClient):
    """A client whose start waits for the kernel's first reply and one iopub message, not for silence.

    jupyter_client waits for 0.2 s of iopub silence after ``kernel_info_reply``. Output is safe once
    iopub delivers a message: the subscription is then in place, and nbclient keeps only messages
    whose parent is the cell it runs, so stale start-up messages are ignored anyway."""

    @default("context")
    def _fast_reconnecting_context(self) -> zmq.asyncio.Context:
        # The client usually connects before the kernel has bound its sockets; ZeroMQ then retries
        # every 100 ms by default, which would sit idle on the path of every cold start.
        self._created_context = True
        context = zmq.asyncio.Context()
        context.setsockopt(zmq.RECONNECT_IVL, 5)
        # What ZeroMQ's I/O thread may queue in the grader before Python reads it: at most
        # RECEIVE_QUEUE messages per socket (then the kernel's side queues or drops), each at most
        # MAX_MESSAGE_BYTES (``_Relay`` cuts a kernel that sends more). Unbounded, one kernel took the
        # grader to 2.5 GB with 100 MB frames, and to 2.9 GB with one message of 200 frames.
        context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        context.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
        return context

    _relay: _Relay | None = None

    def _make_url(self, channel: str) -> str:
        """Connect through a relay that caps each message the kernel sends (ipc transport only)."""
        url = super()._make_url(channel)
        if self.transport != "ipc":
            return url
        if self._relay is None:
            self._relay = _Relay(MAX_MESSAGE_BYTES)
        return "ipc://" + self._relay.forward(url.removeprefix("ipc://"))

    @property
    def flooded(self) -> bool:
        """Whether the kernel sent a message over ``MAX_MESSAGE_BYTES`` (it is then cut off)."""
        return self._relay is not None and self._relay.violated.is_set()

    def stop_channels(self) -> None:
        super().stop_channels()
        if self._relay is not None:
            self._relay.close()

    async def _async_wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout if timeout is not None else 60.0)
        while time.monotonic() < deadline:
            msg_id = self.kernel_info()
            try:
                reply = await self._async_recv_reply(msg_id, timeout=min(1.0, max(0.0, deadline - time.monotonic())))
            except TimeoutError:
                if not await self._async_is_alive():
                    raise RuntimeError("Kernel died before replying to kernel_info") from None
                continue
            # The kernel answers kernel_info on iopub too (busy, idle): one of them proves the subscription.
            try:
                await self._async_get_iopub_msg(timeout=0.5)
            except Empty:
                continue  # subscribed too late for this request's messages: ask again
            self._handle_kernel_info_reply(reply)
            return
        raise RuntimeError("Kernel didn't respond in time")

    wait_for_ready = _async_wait_for_ready


class _SandboxedKernelManager(AsyncKernelManager):
    """An ipykernel started through a fixed argv (optionally inside bwrap), over IPC sockets.

    In a sandbox the sockets live in the sandbox's own /tmp; once the sandbox runs, the manager's
    ``ip`` is switched to the same place as seen from the host (``/proc/<pid>/root/...``)."""

    sandbox: Sandbox | None = None

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        if self.sandbox is None:
            return [sys.executable, *KERNEL_ARGV, "-f", self.connection_file]
        argv = [sys.executable, *KERNEL_ARGV, "-f", f"{self.sandbox.inside_dir}/kernel.json"]
        return self.sandbox.command(Path(self.connection_file), argv)

    def write_connection_file(self, **kwargs: Any) -> None:
        super().write_connection_file(**kwargs)
        os.chmod(self.connection_file, 0o644)  # the kernel may run under another uid

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
        await super()._async_launch_kernel(kernel_cmd, **kw)
        if self.sandbox is not None:
            assert self.provisioner is not None
            process = getattr(self.provisioner, "process", None)
            assert process is not None
            self.sandbox.attach(process.pid)
            self.ip = self.sandbox.host_path(f"{self.sandbox.inside_dir}/k")

    async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
        """Kill the sandbox and wait on its process: no shutdown request, no 100 ms polling."""
        self.shutting_down = True
        self.stop_restarter()
        process = getattr(self.provisioner, "process", None)
        try:
            if self.sandbox is not None:
                self.sandbox.kill()
            if process is not None:
                if process.poll() is None:
                    process.kill()
                process.wait(timeout=10)  # returns as soon as the kernel is reaped
                self.provisioner.process = None  # type: ignore[union-attr]
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            await self._async_cleanup_resources(restart=restart)

    shutdown_kernel = _async_shutdown_kernel


class _CappedClient(NotebookClient):
    """nbclient with a cap on everything the kernel sends while a cell runs, per cell and per submission.

    Every iopub message except ``status`` and ``execute_input`` is charged by size before nbclient
    sees it: stream and display outputs, display updates (which would otherwise swap a small stored
    output for a huge one), errors and comm/widget messages. Widget state is never stored: a grader
    has no use for it, and nbclient would keep every byte of it.
    """

    def __init__(self, nb: nbformat.NotebookNode, km: AsyncKernelManager, limits: Limits, report: RunReport) -> None:
        super().__init__(
            nb,
            km=km,
            timeout=int(limits.cell_timeout_s),
            allow_errors=True,
            record_timing=False,
            interrupt_on_timeout=False,
            shutdown_kernel="immediate",
            kernel_name="python3",
            store_widget_state=False,
        )
        self._limits = limits
        self._report = report
        self._total = 0
        self._cell_chars: dict[int, int] = {}

    def process_message(self, msg: dict[str, Any], cell: nbformat.NotebookNode, cell_index: int) -> Any:
        msg_type = msg.get("msg_type") or msg.get("header", {}).get("msg_type", "")
        if msg_type in ("status", "execute_input"):
            return super().process_message(msg, cell, cell_index)
        if msg_type == "error":
            msg["content"] = _trim_error(msg.get("content"))
        size = _size(msg.get("content")) + sum(_size(b) for b in msg.get("buffers") or [])
        if msg_type.startswith("comm"):
            self._charge(cell_index, size)  # counted, never stored
            return None
        if self._charge(cell_index, size):
            return super().process_message(msg, cell, cell_index)
        if msg_type == "error" and not any(o.get("output_type") == "error" for o in cell.outputs):
            content = msg["content"]  # over the cap, but a failing cell must still be recognised
            msg["content"] = {"ename": content["ename"], "evalue": content["evalue"][:200], "traceback": []}
            return super().process_message(msg, cell, cell_index)
        return None

    def handle_comm_msg(self, outs: list[Any], msg: dict[str, Any], cell_index: int) -> None:
        """Widgets are neither stored nor answered (``process_message`` never forwards comm messages)."""

    def _charge(self, cell_index: int, size: int) -> bool:
        """Count ``size`` against the caps; False (and the cell marked truncated) when it does not fit."""
        used = self._cell_chars.get(cell_index, 0)
        if used + size > self._limits.output_bytes_per_cell or self._total + size > self._limits.output_bytes_total:
            if cell_index < len(self._report.cells):
                self._report.cells[cell_index].truncated = True
            return False
        self._cell_chars[cell_index] = used + size
        self._total += size
        return True


def _size(value: Any) -> int:
    """Approximate size of decoded message content in characters, without serialising it again."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (str, bytes, bytearray, memoryview)):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            total += 8
    return total


def _trim_error(content: Any) -> dict[str, Any]:
    """An error output cut to what a reader needs: its type, the start of its message, and the
    head and tail of the traceback, each entry capped."""
    content = content if isinstance(content, dict) else {}
    tb = content.get("traceback")
    tb = [str(t)[:TRACEBACK_ENTRY_CHARS] for t in tb] if isinstance(tb, list) else []
    if len(tb) > TRACEBACK_HEAD + TRACEBACK_TAIL:
        tb = [*tb[:TRACEBACK_HEAD], "...", *tb[-TRACEBACK_TAIL:]]
    return {
        "ename": str(content.get("ename", ""))[:100],
        "evalue": str(content.get("evalue", ""))[:1000],
        "traceback": tb,
    }


class KernelSession:
    """One kernel for one submission. Start it early (``start``), use it once, then ``close``."""

    def __init__(self, limits: Limits, sandbox: bool = True, zygotes: ZygotePool | None = None) -> None:
        self.limits = limits
        self.sandbox = sandbox
        self.box: Sandbox | None = Sandbox(limits) if sandbox else None
        # A private host folder (0700) for the connection file; without a sandbox, the sockets too.
        self.host_dir = Path(tempfile.mkdtemp(prefix="course-kernel-"))
        self.km: AsyncKernelManager
        if zygotes is not None and self.box is not None and self.box.lease is not None:
            # Forked from the worker's zygote (root mode): the box's uid, cgroups and limits.
            cgroups = tuple(Path(f).parent for f in self.box.cgroup.procs_files()) if self.box.cgroup else ()
            self.km = zygotes.kernel_manager(self.box.lease.uid, limits, str(self.host_dir / "kernel.json"), cgroups)
        else:
            ip = f"{self.box.inside_dir}/k" if self.box else str(self.host_dir / "k")
            km = _SandboxedKernelManager(
                kernel_name="python3",
                transport="ipc",
                ip=ip,
                connection_file=str(self.host_dir / "kernel.json"),
            )
            km.sandbox = self.box
            self.km = km
        self.km.client_factory = _ReadyClient
        self.client: _CappedClient | None = None
        self._timer: threading.Timer | None = None
        self.killed_by_timer = False
        self._dead = False
        self._cells: list[CellRun] = []

    def start(self) -> None:
        """Launch the kernel process; it finishes booting in the background."""
        run_sync(self.km.start_kernel)(
            cwd=str(self.host_dir) if not self.sandbox else None,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if isinstance(self.km, ZygoteKernelManager) and self.box is not None:
            self.box.adopt(self.km.provisioner.process.pid)  # type: ignore[union-attr]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "SYSTEMROOT")}
        env.update(
            {
                "HOME": str(self.host_dir),
                "IPYTHONDIR": str(self.host_dir / ".ipython"),
                "OPENBLAS_NUM_THREADS": "1",
                "JUPYTER_PLATFORM_DIRS": "1",
            }
        )
        return env

    @property
    def lease(self) -> UidLease | None:
        """The uid leased for this kernel (root mode), for code that starts the kernel another way."""
        return self.box.lease if self.box is not None else None

    @property
    def ipc_dir(self) -> Path:
        """The private host folder that holds the connection file."""
        return self.host_dir

    @property
    def memory_exceeded(self) -> bool:
        """Whether the memory watcher killed this submission for holding more than ``memory_mb``."""
        return self.box is not None and self.box.memory_exceeded

    def run_cells(self, cells: list[tuple[str, str]], report: RunReport) -> None:
        """Execute (id, source) cells in order with nbclient, recording each cell's fate."""
        # A lone surrogate (e.g. half an emoji in a comment) cannot be encoded as UTF-8 for the wire.
        cells = [(cid, _SURROGATE.sub("\ufffd", src)) for cid, src in cells]
        nb = nbformat.v4.new_notebook()
        nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
        nb.cells = [nbformat.v4.new_code_cell(src, id=cid) for cid, src in cells]
        self.client = _CappedClient(nb, self.km, self.limits, report)
        self._timer = threading.Timer(self.limits.submission_timeout_s, self._kill_on_deadline)
        self._timer.daemon = True
        self._timer.start()
        self.client.start_new_kernel_client()
        kc = self.client.kc
        if isinstance(kc, _ReadyClient) and kc._relay is not None:  # a kernel that floods is killed
            kc._relay.on_violation = self._kill_on_flood
            if kc.flooded:
                self._kill_on_flood()
        report.cells = [CellRun(cid, "skipped", lines=len(src.splitlines())) for cid, src in cells]
        self._cells = report.cells
        for index, cell in enumerate(nb.cells):
            run = report.cells[index]
            try:
                self.client.execute_cell(cell, index)
            except (CellTimeoutError, DeadKernelError) as stop:
                # An uninterrupted cell keeps the kernel busy, and a dead one answers nothing: stop here.
                run.status = "timeout" if isinstance(stop, CellTimeoutError) else "dead"
                self._dead = True
                run.truncated = run.truncated or self._flooded()
                run_sync(_settle)()
                break
            errors = [o for o in cell.outputs if o.get("output_type") == "error"]
            run.status = "error" if errors else "ok"
            if errors:
                self._describe_error(run, errors[-1])
        report.submission_timed_out = self.killed_by_timer
        if not self._dead:
            self._execute_silently(_CALL_HELPER)

    def _describe_error(self, run: CellRun, error: Any) -> None:
        """Fill in what the student may read about the exception that stopped a cell of theirs."""
        run.error_name = clean(str(error.get("ename", "")), 80)
        run.error_message = clean(str(error.get("evalue", "")), ERROR_MESSAGE_CHARS)
        reply = self._execute_silently(_LAST_ERROR_PROBE, {"r": "__course_last__"})
        where = _expression_json(reply)
        if not isinstance(where, dict):
            return
        if isinstance(where.get("message"), str):  # a SyntaxError: Python's short message, no file name
            run.error_message = clean(where["message"], ERROR_MESSAGE_CHARS)
        line = where.get("line")
        if type(line) is int and 1 <= line <= max(run.lines, 1):
            run.error_line = line

    def _flooded(self) -> bool:
        """Whether the kernel was cut off for sending a message over ``MAX_MESSAGE_BYTES``."""
        kc = self.client.kc if self.client is not None else None
        return isinstance(kc, _ReadyClient) and kc.flooded

    def _kill_on_flood(self) -> None:
        self._kill()

    def _kill_on_deadline(self) -> None:
        self.killed_by_timer = True
        self._kill()

    def _kill(self) -> None:
        """Kill the kernel and its sandbox now (from any thread); close() tidies up later."""
        self._dead = True
        if self.box is not None:
            self.box.kill()
        process = getattr(self.km.provisioner, "process", None)
        if process is not None and process.poll() is None:
            process.kill()

    def _execute_silently(self, code: str, expressions: dict[str, str] | None = None) -> dict[str, Any] | None:
        assert self.client is not None and self.client.kc is not None
        kc = self.client.kc
        msg_id = kc.execute(code, silent=True, store_history=False, user_expressions=expressions or {})
        reply = self._reply(msg_id, self.limits.cell_timeout_s)
        if reply is None:
            self._dead = True  # a kernel that does not answer our own code will not answer a check
        return reply

    def _reply(self, msg_id: str, timeout: float) -> dict[str, Any] | None:
        """Wait for the shell reply to ``msg_id``, emptying iopub all the while: whatever a call
        prints is discarded, and must not pile up in the grader's memory while we wait."""
        assert self.client is not None and self.client.kc is not None
        kc = self.client.kc
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.killed_by_timer:
            self._drain_iopub()
            try:
                msg = run_sync(kc._async_get_shell_msg)(timeout=min(0.05, max(0.01, deadline - time.monotonic())))
            except Empty:
                if not run_sync(self.km.is_alive)():
                    self._dead = True
                    return None
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                self._drain_iopub()
                return msg
        return None

    def _drain_iopub(self) -> None:
        assert self.client is not None and self.client.kc is not None
        for _ in range(10_000):
            try:
                run_sync(self.client.kc._async_get_iopub_msg)(timeout=0)
            except Empty:
                return

    def call(self, function: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call ``function(*args, **kwargs)`` in the kernel; return its result as plain data."""
        if self._dead or self.client is None or self.client.kc is None:
            raise StudentCallError("dead", function)
        payload = json.dumps({"args": args, "kwargs": kwargs})
        expr = f"__course_call__({function!r}, {payload!r})"
        msg_id = self.client.kc.execute("", silent=True, store_history=False, user_expressions={"r": expr})
        reply = self._reply(msg_id, self.limits.cell_timeout_s)
        if reply is None:
            self._dead = True
            raise StudentCallError(
                "dead" if self.killed_by_timer or not run_sync(self.km.is_alive)() else "timeout", function
            )
        return _parse_result(reply, function, self._cells)

    def close(self) -> None:
        """Kill the kernel and everything it started, and remove all it had on the host."""
        if self._timer is not None:
            self._timer.cancel()
        try:
            if self.client is not None and self.client.kc is not None:
                self.client.kc.stop_channels()
            run_sync(self.km.shutdown_kernel)(now=True)
        except Exception:  # noqa: BLE001 - the kernel may already be gone; cleanup must not fail
            pass
        finally:
            if self.box is not None:  # kills what is left, removes its cgroups, frees its uid
                self.box.close()
            shutil.rmtree(self.host_dir, ignore_errors=True)


def _expression_json(reply: dict[str, Any] | None) -> Any:
    """The JSON text a user expression ``r`` evaluated to, parsed; None when anything is off."""
    try:
        entry = reply["content"]["user_expressions"]["r"]  # type: ignore[index]
        if entry.get("status") != "ok":
            return None
        text = entry["data"]["text/plain"]
        if not isinstance(text, str) or len(text) > RESULT_LIMIT * 2:
            return None
        raw = ast.literal_eval(text)
        return json.loads(raw) if isinstance(raw, str) else None
    except Exception:  # noqa: BLE001 - anything malformed is the submission's fault
        return None


def _parse_result(reply: dict[str, Any], function: str, cells: list[CellRun]) -> Any:
    """Turn an execute_reply into plain data, trusting nothing in it."""
    data = _expression_json(reply)
    if not isinstance(data, dict):
        raise StudentCallError("bad-result", function)
    if set(data) == {"ok"}:
        return data["ok"]
    if "missing" in data:
        raise StudentCallError("missing", function)
    if "unsupported" in data:
        raise StudentCallError("bad-result", function)
    if data.get("blank") is True:
        raise StudentCallError("blank", function)
    name = data.get("error")
    cell, line = data.get("cell"), data.get("line")
    # The kernel is the student's: accept only a real built-in name and a line inside a real cell.
    where = cells[cell - 1] if type(cell) is int and 1 <= cell <= len(cells) else None
    if where is None or type(line) is not int or not 1 <= line <= where.lines:
        where, line = None, None
    shown = name if name in BUILTIN_EXCEPTIONS else "Exception"
    raise StudentCallError("error", function, shown, where.id if where else "", line)
