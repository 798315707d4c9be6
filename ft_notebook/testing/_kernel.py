"""A real IPython kernel driven the way a notebook front end drives it.

Magics and snapshots are tested against a kernel process started by jupyter_client,
so a crash is a real SIGKILL of a real process and a restore happens in a new one.
The kernel runs in its own session with its output in a log file.
"""

from __future__ import annotations

import os
import queue
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from jupyter_client.manager import KernelManager

from ft_notebook.testing._poll import poll_for


@dataclass
class ExecResult:
    """What one ``execute`` produced, collected from the iopub channel."""

    status: str
    stdout: str = ""
    stderr: str = ""
    result: str | None = None  # text/plain of the cell's value
    displays: list[dict[str, Any]] = field(default_factory=list)
    #: The ``data`` of each comm_open and comm_msg (widget states and their updates).
    comms: list[dict[str, Any]] = field(default_factory=list)
    error_name: str | None = None
    error_value: str | None = None
    traceback: str = ""
    wall_s: float = 0.0  # from sending the request to the kernel going idle

    def check(self) -> ExecResult:
        """Return self if the cell succeeded, else fail with the kernel's traceback."""
        if self.status != "ok":
            raise AssertionError(
                f"cell failed: {self.error_name}: {self.error_value}\n{self.traceback}"
            )
        return self


class KernelSession:
    """One kernel process at a time; ``kill`` and ``start`` make a crash and a fresh kernel."""

    def __init__(
        self,
        log_path: Path,
        cwd: Path,
        env: dict[str, str] | None = None,
        python: str | None = None,
    ) -> None:
        self.log_path = log_path
        self.cwd = cwd
        self.env = dict(os.environ if env is None else env)
        self.python = python  # another interpreter's kernel (a benchmark's own venv)
        self._km: KernelManager | None = None
        self._kc: Any = None
        self._log: IO[bytes] | None = None

    def start(self, timeout: float = 60.0) -> KernelSession:
        self._log = self.log_path.open("ab")
        km = KernelManager(kernel_name="python3")
        if self.python is not None:
            from jupyter_client.kernelspec import KernelSpec

            argv = [self.python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
            km._kernel_spec = KernelSpec(argv=argv, display_name="Python 3", language="python")
        km.start_kernel(stdout=self._log, stderr=self._log, env=self.env, cwd=str(self.cwd))
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=timeout)
        self._km, self._kc = km, kc
        return self

    @property
    def pid(self) -> int:
        assert self._km is not None, "kernel not started"
        assert self._km.provisioner is not None, "kernel not started"
        return int(self._km.provisioner.process.pid)  # type: ignore[attr-defined]

    def execute(self, code: str, timeout: float = 60.0, *, silent: bool = False) -> ExecResult:
        """Run ``code`` as a cell and collect its outputs until the kernel is idle.

        ``silent`` runs it the way front ends run their own code: no history, and no
        pre/post-run-cell events (so no snapshot hooks fire).
        """
        assert self._kc is not None, "kernel not started"
        msg_id = self._kc.execute(code, store_history=not silent, silent=silent)
        return self.collect(msg_id, timeout, what=repr(code))

    def collect(self, msg_id: str, timeout: float = 60.0, *, what: str = "") -> ExecResult:
        """The outputs of the cell ``msg_id`` (from :meth:`send`), until it is done."""
        assert self._kc is not None, "kernel not started"
        start = time.perf_counter()
        out = ExecResult(status="ok")
        while True:
            try:
                msg = self._kc.get_iopub_msg(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(
                    f"no output from the kernel within {timeout} s for {what or msg_id}"
                ) from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    out.stdout += content["text"]
                else:
                    out.stderr += content["text"]
            elif kind == "execute_result":
                out.result = content["data"].get("text/plain")
            elif kind == "display_data":
                out.displays.append(content["data"])
            elif kind in ("comm_open", "comm_msg"):  # widgets: their models and updates
                out.comms.append(content.get("data") or {})
            elif kind == "error":
                out.status = "error"
                out.error_name, out.error_value = content["ename"], content["evalue"]
                out.traceback = "\n".join(content["traceback"])
            elif kind == "status" and content["execution_state"] == "idle":
                out.wall_s = time.perf_counter() - start
                return self._with_reply(out, msg_id, timeout)

    def interrupt(self) -> None:
        """What the stop button does: SIGINT to the kernel."""
        assert self._km is not None, "kernel not started"
        self._km.interrupt_kernel()

    def send(self, code: str) -> str:
        """Start ``code`` as a cell and return at once (to kill the kernel mid-cell)."""
        assert self._kc is not None, "kernel not started"
        return str(self._kc.execute(code, store_history=True))

    def _with_reply(self, out: ExecResult, msg_id: str, timeout: float) -> ExecResult:
        """Take the status from the execute reply: a UsageError, for one, is shown as
        plain text on iopub, and only the reply says the cell failed."""
        while True:
            reply = self._kc.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        content = reply["content"]
        if content["status"] != "ok":
            out.status = content["status"]
            out.error_name = out.error_name or content.get("ename")
            out.error_value = out.error_value or content.get("evalue")
        return out

    def kill(self) -> None:
        """SIGKILL the kernel process, as the OOM killer would, and wait until it is gone."""
        km = self._km
        assert km is not None, "kernel not started"
        pid = self.pid
        os.kill(pid, signal.SIGKILL)
        poll_for(lambda: not km.is_alive(), timeout=10, what=f"kernel {pid} to die")
        self.shutdown()  # reaps the process and removes its connection file

    def shutdown(self) -> None:
        if self._km is None:
            return
        self._close_channels()
        km, self._km = self._km, None
        if km.has_kernel:
            km.shutdown_kernel(now=True)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _close_channels(self) -> None:
        if self._kc is not None:
            self._kc.stop_channels()
            self._kc = None
