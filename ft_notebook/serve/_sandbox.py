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

The replica unpickles what its sandbox sends: both are this worker's process (the
same user), and the pipes are private to them. This isolates crashes, not a hostile
input: one that corrupts the sandbox's memory could send the replica what it likes.
"""

from __future__ import annotations

import contextlib
import ctypes
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

import cloudpickle

_LENGTH = struct.Struct("!Q")
#: The sandbox's word that it has read a request whole: if it dies before, the request
#: was not what killed it (it died idle, killed by the OOM killer or by hand).
_TAKEN = b"\x01"


def available(device: Any) -> bool:
    """Whether a replica on ``device`` (None: not a torch model) can have a sandbox."""
    return sys.platform == "linux" and (device is None or getattr(device, "type", "") == "cpu")


class Sandbox:
    """The replica's side: :meth:`start` from the thread that runs the model (no call
    of it half done in the copy; the sandbox also dies with that thread), :meth:`run`
    from any thread, :meth:`stop` from any thread. One lock holds the sandbox's pid
    and pipes: a run, a start and the end of a stop never overlap."""

    def __init__(self, call: Callable[[Any], Any]) -> None:
        self._call = call
        self.pid = 0
        self._to = self._from = -1
        self._lock = threading.Lock()  # one request in the sandbox at a time
        self._closing = False

    @property
    def running(self) -> bool:
        return self.pid > 0

    def start(self) -> None:
        """Fork the sandbox (~5 ms: the page tables are copied, not the memory); not
        once :meth:`stop` was called."""
        with self._lock:
            if self.running or self._closing:
                return
            down_r, down_w = os.pipe()  # replica -> sandbox
            up_r, up_w = os.pipe()  # sandbox -> replica
            parent = os.getpid()
            pid = os.fork()
            if pid == 0:  # the sandbox: only this thread exists here; it never returns
                _serve(self._call, parent, down_r, up_w)
            os.close(down_r)
            os.close(up_w)
            os.set_blocking(down_w, False)  # a send waits with a deadline, see _send
            self.pid, self._to, self._from = pid, down_w, up_r

    def run(self, x: Any, deadline: float) -> tuple[Any, ...]:
        """``x`` through the model in the sandbox: ("ok", y), ("raised", text,
        traceback), ("memory", text), ("died", how) when the sandbox ended on it,
        ("late",) when no answer came by ``deadline`` (a monotonic time;
        the sandbox is killed), ("absent",) when there was no sandbox to send it to
        (another request ended it, or it died idle: start one and ask again).
        Blocks."""
        with self._lock:
            if self._closing or not self.running:
                return ("absent",)
            if _ended(self.pid):  # it died idle (memory short?): reaped now
                self.pid = -self.pid
                self._reap()
                return ("absent",)
            try:
                data = _dumps(x)
            except Exception as e:
                text = f"{type(e).__name__}: {e} (the input could not be sent to the sandbox)"
                return ("raised", text, "")
            try:
                _send(self._to, data, deadline)
            except (BrokenPipeError, EOFError):  # it died before it read a request
                self._reap()
                return ("absent",)
            except TimeoutError:
                self._reap(kill=True)
                return ("late",)
            try:
                taken = _read(self._from, 1, deadline)  # it has the request: it runs it
            except TimeoutError:
                self._reap(kill=True)
                return ("late",)
            except (EOFError, OSError):  # it ended before it took the request
                self._reap()
                return ("absent",)
            assert taken == _TAKEN
            try:
                answer = _receive(self._from, deadline)
            except TimeoutError:
                self._reap(kill=True)
                return ("late",)
            except (EOFError, OSError):
                how = self._reap()
                return ("absent",) if self._closing else ("died", how)
            outcome: tuple[Any, ...] = pickle.loads(answer)  # our own fork's
            return outcome

    def stop(self) -> None:
        """Kill the sandbox and let it be reaped (by a run in flight, which then
        answers "absent", or here); it is not started again."""
        self._closing = True
        pid = self.pid
        if pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # a run in flight reads its end at once
        with self._lock:
            if self.running:
                self._reap(kill=True)

    def _reap(self, *, kill: bool = False) -> str:
        """Close the pipes and wait for the sandbox's end (call with the lock held);
        how it ended. It is gone after this."""
        pid, self.pid = self.pid, 0
        for fd in (self._to, self._from):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._to = self._from = -1
        if pid < 0:
            return "ended"  # reaped by the caller
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


def _ended(pid: int) -> bool:
    """Whether ``pid`` has ended; reaps it if so."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:  # reaped by someone else
        return True


def _serve(call: Callable[[Any], Any], parent: int, down: int, up: int) -> None:
    """The sandbox's life: one request at a time until the replica's pipe closes."""
    code = 0
    try:
        _alone(parent, keep={0, 1, 2, down, up})
        while True:
            try:
                x = pickle.loads(_receive(down, None))  # our parent's
            except EOFError:
                break
            os.write(up, _TAKEN)  # a death from here on is this request's
            outcome: tuple[Any, ...]
            try:
                outcome = ("ok", call(x))
            except MemoryError as e:
                outcome = ("memory", f"{type(e).__name__}: {e}")
            except BaseException as e:
                outcome = ("raised", f"{type(e).__name__}: {e}", traceback.format_exc())
            try:
                data = _dumps(outcome)
            except Exception as e:  # the model answered, with what cannot travel
                text = f"{type(e).__name__}: {e} (the model's answer could not be sent back)"
                data = pickle.dumps(("raised", text, ""))
            _send(up, data, None)
    except BaseException:
        code = 70  # the replica reads "died", with this code
    finally:
        os._exit(code)


def _alone(parent: int, keep: set[int]) -> None:
    """Cut the sandbox from its worker: no file of the worker held open (its sockets
    among them), no handler of its signals, killed with the thread that forked it,
    on one thread, first to go when memory runs out."""
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in keep:
            with contextlib.suppress(OSError):
                os.close(int(name))
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    _die_with_parent(parent)
    _one_thread()
    _first_to_go()


def _die_with_parent(parent: int) -> None:
    """SIGKILL when the thread that forked us ends (the replica closed, the worker
    died): a sandbox busy on a hung input would never read that its pipe closed."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the line above
        os._exit(0)


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


def _dumps(value: Any) -> bytes:
    """Pickled by the C pickler (a tensor in microseconds), or by cloudpickle when it
    holds what only cloudpickle can (a class or function made in a notebook)."""
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        data: bytes = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        return data


def _send(fd: int, data: bytes, deadline: float | None) -> None:
    """One framed message; TimeoutError past ``deadline`` (a sandbox that does not
    read), BrokenPipeError if the other end is gone."""
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            _wait(fd, select.POLLOUT, deadline)


def _receive(fd: int, deadline: float | None) -> bytes:
    """One framed message; EOFError if the other end closed first, TimeoutError past
    ``deadline`` (None: wait for ever)."""
    header = _read(fd, _LENGTH.size, deadline)
    return _read(fd, _LENGTH.unpack(header)[0], deadline)


def _read(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            _wait(fd, select.POLLIN, deadline)
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _wait(fd: int, event: int, deadline: float | None) -> None:
    """Until ``fd`` is ready for ``event`` (or closed at the other end); poll, not
    select: a busy worker's descriptors pass 1024."""
    poller = select.poll()
    poller.register(fd, event)
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    if not poller.poll(None if left is None else left * 1000):
        raise TimeoutError
