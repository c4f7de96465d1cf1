"""Run a submission's exercise cells in a fresh kernel and call its functions for the hidden tests.

The kernel executes student code and nothing else. The grader asks it to call a named function and
receives the result as JSON text inside the ``execute_reply`` (a ``user_expressions`` entry), never
on stdout, and never as a pickle. Whatever the kernel sends is parsed as plain data and compared in
the grader's process, so a hostile kernel can only ever return wrong data.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any

import nbformat
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from .course import Limits
from .sandbox import next_uid, sandbox_prefix

RESULT_LIMIT = 1_000_000  # characters of JSON a single call may return

# Defined in the kernel after the student's cells. It converts the result to JSON-able plain data,
# by exact type, so subclasses with hostile __eq__/__iter__/__len__ are refused rather than trusted.
_CALL_HELPER = r"""
def __course_call__(name, payload):
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
    try:
        req = _json.loads(payload)
        fn = get_ipython().user_ns.get(name)
        if fn is None or not callable(fn):
            return _json.dumps({"missing": name})
        value = fn(*_decode(req["args"]), **_decode(req["kwargs"]))
    except BaseException as exc:
        return _json.dumps({"error": type(exc).__name__, "blank": "______" in str(exc)})
    try:
        return _json.dumps({"ok": _plain(value)})
    except BaseException:
        return _json.dumps({"unsupported": True})
"""


class StudentCallError(Exception):
    """A call into the student's kernel did not return a usable value."""

    def __init__(self, kind: str, function: str, detail: str = "") -> None:
        self.kind = kind  # missing | error | blank | timeout | dead | bad-result
        self.function = function
        self.detail = detail
        super().__init__(f"{kind}: {function} {detail}".strip())


@dataclass
class CellRun:
    id: str
    status: str  # ok | error | timeout | dead | skipped
    error_name: str = ""
    truncated: bool = False


@dataclass
class RunReport:
    cells: list[CellRun] = field(default_factory=list)
    submission_timed_out: bool = False


class _SandboxedKernelManager(AsyncKernelManager):
    """An ipykernel started through a fixed argv (optionally inside bwrap), over IPC sockets."""

    prefix: list[str] = []

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        return [*self.prefix, sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file]

    def write_connection_file(self, **kwargs: Any) -> None:
        super().write_connection_file(**kwargs)
        os.chmod(self.connection_file, 0o644)  # the kernel runs under another uid


class _CappedClient(NotebookClient):
    """nbclient with a cap on captured output, per cell and per submission."""

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
        )
        self._limits = limits
        self._report = report
        self._total = 0
        self._cell_chars: dict[int, int] = {}

    def output(self, outs, msg, display_id, cell_index):
        if msg.get("msg_type") == "error":  # always kept: it is how a failing cell is recognised
            msg["content"]["traceback"] = msg["content"].get("traceback", [])[-20:]
            return super().output(outs, msg, display_id, cell_index)
        size = len(json.dumps(msg.get("content", {}), default=str))
        used = self._cell_chars.get(cell_index, 0)
        if used + size > self._limits.output_bytes_per_cell or self._total + size > self._limits.output_bytes_total:
            run = self._report.cells[cell_index] if cell_index < len(self._report.cells) else None
            if run is not None:
                run.truncated = True
            return None
        self._cell_chars[cell_index] = used + size
        self._total += size
        return super().output(outs, msg, display_id, cell_index)


class KernelSession:
    """One kernel for one submission. Start it early (``start``), use it once, then ``close``."""

    def __init__(self, limits: Limits, sandbox: bool = True) -> None:
        self.limits = limits
        self.sandbox = sandbox
        self.ipc_dir = Path(tempfile.mkdtemp(prefix="course-kernel-"))
        os.chmod(self.ipc_dir, 0o733)
        self.km = _SandboxedKernelManager(
            kernel_name="python3",
            transport="ipc",
            ip=str(self.ipc_dir / "k"),
            connection_file=str(self.ipc_dir / "kernel.json"),
        )
        self.km.prefix = sandbox_prefix(self.ipc_dir, limits, next_uid()) if sandbox else []
        self.client: _CappedClient | None = None
        self._timer: threading.Timer | None = None
        self.killed_by_timer = False
        self._dead = False

    def start(self) -> None:
        """Launch the kernel process; it finishes booting in the background."""
        run_sync(self.km.start_kernel)(
            cwd=str(self.ipc_dir) if not self.sandbox else None,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "SYSTEMROOT")}
        env.update(
            {
                "HOME": str(self.ipc_dir),
                "IPYTHONDIR": str(self.ipc_dir / ".ipython"),
                "OPENBLAS_NUM_THREADS": "1",
                "PYDEVD_DISABLE_FILE_VALIDATION": "1",
                "JUPYTER_PLATFORM_DIRS": "1",
            }
        )
        return env

    def run_cells(self, cells: list[tuple[str, str]], report: RunReport) -> None:
        """Execute (id, source) cells in order with nbclient, recording each cell's fate."""
        nb = nbformat.v4.new_notebook()
        nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
        nb.cells = [nbformat.v4.new_code_cell(src, id=cid) for cid, src in cells]
        self.client = _CappedClient(nb, self.km, self.limits, report)
        self._timer = threading.Timer(self.limits.submission_timeout_s, self._kill_on_deadline)
        self._timer.daemon = True
        self._timer.start()
        self.client.start_new_kernel_client()
        report.cells = [CellRun(cid, "skipped") for cid, _ in cells]
        for index, cell in enumerate(nb.cells):
            run = report.cells[index]
            try:
                self.client.execute_cell(cell, index)
            except CellTimeoutError:
                run.status = "timeout"
                self._dead = True  # an uninterrupted cell keeps the kernel busy: stop here
                break
            except DeadKernelError:
                run.status = "dead"
                self._dead = True
                break
            errors = [o for o in cell.outputs if o.get("output_type") == "error"]
            run.status = "error" if errors else "ok"
            run.error_name = str(errors[0].get("ename", ""))[:80] if errors else ""
        report.submission_timed_out = self.killed_by_timer
        if not self._dead:
            self._execute_silently(_CALL_HELPER)

    def _kill_on_deadline(self) -> None:
        self.killed_by_timer = True
        self._dead = True
        process = getattr(self.km.provisioner, "process", None)
        if process is not None and process.poll() is None:
            process.kill()

    def _execute_silently(self, code: str) -> dict[str, Any] | None:
        assert self.client is not None and self.client.kc is not None
        kc = self.client.kc
        msg_id = kc.execute(code, silent=True, store_history=False)
        return self._reply(msg_id, self.limits.cell_timeout_s)

    def _reply(self, msg_id: str, timeout: float) -> dict[str, Any] | None:
        assert self.client is not None and self.client.kc is not None
        kc = self.client.kc
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.killed_by_timer:
            try:
                msg = run_sync(kc._async_get_shell_msg)(timeout=min(0.5, max(0.01, deadline - time.monotonic())))
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
        return _parse_result(reply, function)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        try:
            if self.client is not None and self.client.kc is not None:
                self.client.kc.stop_channels()
            run_sync(self.km.shutdown_kernel)(now=True)
        except Exception:  # noqa: BLE001 - the kernel may already be gone; cleanup must not fail
            pass
        finally:
            try:
                run_sync(self.km.cleanup_resources)()
            except Exception:  # noqa: BLE001
                pass
            shutil.rmtree(self.ipc_dir, ignore_errors=True)


def _parse_result(reply: dict[str, Any], function: str) -> Any:
    """Turn an execute_reply into plain data, trusting nothing in it."""
    try:
        entry = reply["content"]["user_expressions"]["r"]
        if entry.get("status") != "ok":
            raise StudentCallError("bad-result", function)
        text = entry["data"]["text/plain"]
        if not isinstance(text, str) or len(text) > RESULT_LIMIT * 2:
            raise StudentCallError("bad-result", function)
        raw = ast.literal_eval(text)
        if not isinstance(raw, str):
            raise StudentCallError("bad-result", function)
        data = json.loads(raw)
    except StudentCallError:
        raise
    except Exception:  # noqa: BLE001 - anything malformed is the submission's fault
        raise StudentCallError("bad-result", function) from None
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
    raise StudentCallError("error", function, name if isinstance(name, str) and name.isidentifier() else "Exception")
