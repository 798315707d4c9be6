"""A suspect request run in a fork of its replica's process, so that a poison input
takes down the fork and not a second replica.

A request whose replica was lost under it may be what killed it (a crash on the
input), or an innocent one beside a kill. The router re-sends it once, and asks the
replica to run it *isolated*: the replica's thread forks the worker process (the
model is built already and shared copy-on-write: ~5 ms, no second copy of the
weights), the child calls the model on the request alone, writes its answer to a
pipe and exits. The replica goes on serving meanwhile. If the child dies on the
input, the request is poison and fails alone; the replica, and every other request,
never met it.

Only on the CPU and on Linux: CUDA does not survive a fork (the child cannot use the
parent's context), and other systems fork unsafely or not at all. There a suspect
runs in the replica itself, as before (see the router: two replicas at most).

The child's answer is unpickled by its parent: both are this worker's process, the
pipe is private to them, and no one else can write to it.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def available(device: Any) -> bool:
    """Whether a replica on ``device`` (None: not a torch model) can run isolated."""
    return sys.platform == "linux" and (device is None or getattr(device, "type", "") == "cpu")


@dataclass(frozen=True)
class Forked:
    """A child started on one request: its pid and the read end of its pipe."""

    pid: int
    pipe: int


def fork(call: Callable[[Any], Any], x: Any) -> Forked:
    """Fork this process; the child runs ``call(x)`` and writes the outcome, pickled,
    to the pipe: ("ok", y), ("raised", text, traceback) or ("memory", text).

    Call it from the thread that runs the model (the replica's executor), so that no
    call of the model is half done in the copy."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only this thread exists here; leave without cleanup
        code = 0
        try:
            os.close(read)
            _first_to_go()
            outcome: tuple[Any, ...]
            try:
                outcome = ("ok", call(x))
            except MemoryError as e:
                outcome = ("memory", f"{type(e).__name__}: {e}")
            except BaseException as e:
                outcome = ("raised", f"{type(e).__name__}: {e}", traceback.format_exc())
            data = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(data)
            while view:
                view = view[os.write(write, view) :]
        except BaseException:
            code = 70  # the answer could not be sent: the parent reads "no answer"
        finally:
            os._exit(code)
    os.close(write)
    return Forked(pid, read)


def _first_to_go() -> None:
    """Ask the kernel to take this child, not its parent, when memory runs out: an
    input too large for the model should cost the fork (raising one's own score needs
    no privilege)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def collect(child: Forked, timeout_s: float) -> tuple[Any, ...]:
    """The child's outcome, read to its end; ("died", how) when it ended without one
    (killed by a signal, or its exit code), ("late", seconds) when it did not end in
    ``timeout_s`` (it is killed). Blocks: run it in a thread."""
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    try:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([child.pipe], [], [], max(0.0, left))
            if not ready:
                os.kill(child.pid, signal.SIGKILL)
                os.waitpid(child.pid, 0)
                return ("late", timeout_s)
            chunk = os.read(child.pipe, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(child.pipe)
    _, status = os.waitpid(child.pid, 0)
    if chunks and os.waitstatus_to_exitcode(status) == 0:
        outcome: tuple[Any, ...] = pickle.loads(b"".join(chunks))  # our own child's
        return outcome
    return ("died", _ended(status))


def _ended(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"
