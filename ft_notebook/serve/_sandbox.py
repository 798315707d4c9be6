"""A replica's sandbox: a fork of its worker process that runs the requests which may
be poison, so that one that is takes down the sandbox and not a second replica.

A request whose replica was lost under it may be what killed it (a crash on the
input), or an innocent one beside a kill; a request still unanswered at the hedge
time may be slow to crash its replica. The router sends either kind to another
replica *isolated*: that replica hands it to its sandbox, a child forked from the
replica's own thread once the model is built (the weights are shared copy-on-write,
no second copy), which calls the model on one request at a time and answers over a
pipe. The replica goes on serving meanwhile. If the sandbox dies on a request, that
request is poison and fails alone; the replica never met it, and forks a new sandbox
before the next isolated request.

The sandbox computes on one thread (the parent's OpenMP threads do not survive the
fork), closes every file it inherited but its pipes (the worker's sockets among
them: held open by a child, a killed worker's connections would not close, and
callers would not see it lost), and asks the kernel to take it first when memory
runs out. It ends when its replica's pipe closes (the replica stopped or died).

Only on the CPU and on Linux: CUDA does not survive a fork, and other systems fork
unsafely or not at all. There an isolated request runs in the replica itself, as
before (see the router: two replicas at most).

The replica unpickles what its sandbox sends: both are this worker's process, the
pipes are private to them, and no one else can write to them.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

_LENGTH = struct.Struct("!Q")


def available(device: Any) -> bool:
    """Whether a replica on ``device`` (None: not a torch model) can have a sandbox."""
    return sys.platform == "linux" and (device is None or getattr(device, "type", "") == "cpu")


class Sandbox:
    """The replica's side: :meth:`start` from the thread that runs the model (no call
    of it half done in the copy), then :meth:`run` from any one thread at a time."""

    def __init__(self, call: Callable[[Any], Any]) -> None:
        self._call = call
        self.pid = 0
        self._to = self._from = -1
        self._lock = threading.Lock()  # one request in the sandbox at a time

    @property
    def running(self) -> bool:
        return self.pid > 0

    def start(self) -> None:
        """Fork the sandbox (~5 ms: the page tables are copied, not the memory)."""
        if self.running:
            return
        down_r, down_w = os.pipe()  # replica -> sandbox
        up_r, up_w = os.pipe()  # sandbox -> replica
        pid = os.fork()
        if pid == 0:  # the sandbox: only this thread exists here; it never returns
            _serve(self._call, down_r, up_w)
        os.close(down_r)
        os.close(up_w)
        self.pid, self._to, self._from = pid, down_w, up_r

    def run(self, x: Any, timeout_s: float) -> tuple[Any, ...]:
        """``x`` through the model in the sandbox: ("ok", y), ("raised", text,
        traceback), ("memory", text), ("died", how) when the sandbox ended on it, or
        ("late", seconds) when it gave no answer in time (it is killed), ("absent",)
        when there was none to send it to (another request's end ended it: start one
        and ask again). Blocks."""
        with self._lock:
            if not self.running:
                return ("absent",)
            try:
                _send(self._to, pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL))
                data = _receive(self._from, time.monotonic() + timeout_s)
            except TimeoutError:
                self.stop()
                return ("late", timeout_s)
            except (EOFError, OSError):
                return ("died", self._reap())
            outcome: tuple[Any, ...] = pickle.loads(data)  # our own fork's
            return outcome

    def stop(self) -> None:
        if not self.running:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self._reap()

    def _reap(self) -> str:
        """Wait for the sandbox's end; how it ended. It is gone after this."""
        for fd in (self._to, self._from):
            with contextlib.suppress(OSError):
                os.close(fd)
        _, status = os.waitpid(self.pid, 0)
        self.pid, self._to, self._from = 0, -1, -1
        code = os.waitstatus_to_exitcode(status)
        return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


def _serve(call: Callable[[Any], Any], down: int, up: int) -> None:
    """The sandbox's life: one request at a time until the replica's pipe closes."""
    code = 0
    try:
        low, high = sorted((down, up))
        os.closerange(3, low)
        os.closerange(low + 1, high)
        os.closerange(high + 1, os.sysconf("SC_OPEN_MAX"))
        _first_to_go()
        _one_thread()
        while True:
            try:
                x = pickle.loads(_receive(down, None))  # our parent's
            except EOFError:
                break
            outcome: tuple[Any, ...]
            try:
                outcome = ("ok", call(x))
            except MemoryError as e:
                outcome = ("memory", f"{type(e).__name__}: {e}")
            except BaseException as e:
                outcome = ("raised", f"{type(e).__name__}: {e}", traceback.format_exc())
            _send(up, pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
    except BaseException:
        code = 70  # the replica reads "died", with this code
    finally:
        os._exit(code)


def _one_thread() -> None:
    """Compute on this thread only: the parent's OpenMP threads were not copied by the
    fork, and a parallel region here would wait for them for ever (a 4096 x 4096
    matmul hung until its deadline in a fork of a process that had used two threads)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _first_to_go() -> None:
    """Ask the kernel to take this process, not the worker, when memory runs out: an
    input too large for the model should cost the sandbox (raising one's own score
    needs no privilege)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _send(fd: int, data: bytes) -> None:
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _receive(fd: int, deadline: float | None) -> bytes:
    """One framed message; EOFError if the other end closed first, TimeoutError past
    ``deadline`` (None: wait for ever)."""
    header = _read(fd, _LENGTH.size, deadline)
    return _read(fd, _LENGTH.unpack(header)[0], deadline)


def _read(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
