"""A replica's sandbox, a real fork of this process (:mod:`ft_notebook.serve._sandbox`):
its answers, the model's exceptions, a MemoryError, its death and its silence each come
back as what they were; this process is untouched by any of them; the sandbox holds
none of its parent's other files open."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ft_notebook.serve import _sandbox
from ft_notebook.testing import poll_for

pytestmark = pytest.mark.unit

MODEL = torch.nn.Linear(3, 2)


def _model(x: Any) -> Any:
    if x == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if x == "exit":
        os._exit(3)
    if x == "raise":
        raise ValueError("no such input")
    if x == "memory":
        raise MemoryError("Unable to allocate 61.0 GiB")
    if x == "hang":
        time.sleep(60)
    if isinstance(x, str) and x.startswith("hang:"):  # say so, then hang
        Path(x[5:]).touch()
        time.sleep(60)
    if x == "lock":
        return threading.Lock()  # cannot be pickled
    if x == "pid":
        return os.getpid()
    if x == "fds":
        return sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    with torch.inference_mode():
        return MODEL(x)


def _in(seconds: float) -> float:
    """A deadline ``seconds`` from now."""
    return time.monotonic() + seconds


@pytest.fixture
def sandbox() -> Iterator[_sandbox.Sandbox]:
    box = _sandbox.Sandbox(_model)
    box.start()
    yield box
    box.stop()


def test_the_sandbox_answers_with_the_model_it_shares_with_its_parent(sandbox) -> None:
    x = torch.arange(6.0).reshape(2, 3)
    for _ in range(3):  # one process, many requests
        kind, y = sandbox.run(x, _in(30.0))
        assert kind == "ok"
        with torch.inference_mode():
            assert torch.equal(y, MODEL(x))
    assert sandbox.run("pid", _in(30.0)) == ("ok", sandbox.pid) != ("ok", os.getpid())


def test_an_input_that_kills_the_sandbox_kills_only_the_sandbox(sandbox) -> None:
    me = os.getpid()
    assert sandbox.run("die", _in(30.0)) == ("died", "killed by SIGKILL")
    assert not sandbox.running
    assert os.getpid() == me  # and we are here to say so
    sandbox.start()  # the replica forks another: it answers
    assert sandbox.run(torch.zeros(1, 3), _in(30.0))[0] == "ok"
    assert sandbox.run("exit", _in(30.0)) == ("died", "exit code 3")
    # a request that waited its turn behind the one that ended it is no poison: it is
    # told there is no sandbox (the bench saw innocents called poison: "not running")
    assert sandbox.run(torch.zeros(1, 3), _in(30.0)) == ("absent",)


def test_the_models_exceptions_come_back_as_the_callers(sandbox) -> None:
    kind, text, trace = sandbox.run("raise", _in(30.0))
    assert (kind, text) == ("raised", "ValueError: no such input")
    assert "no such input" in trace
    assert sandbox.run("memory", _in(30.0)) == (
        "memory",
        "MemoryError: Unable to allocate 61.0 GiB",
    )
    assert sandbox.running  # an exception is the input's, not the sandbox's end


def test_a_sandbox_that_does_not_answer_in_time_is_killed_and_reaped(sandbox) -> None:
    started = time.monotonic()
    pid = sandbox.pid
    assert sandbox.run("hang", _in(0.5)) == ("late",)
    assert time.monotonic() - started < 10
    assert not sandbox.running
    with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
        os.waitpid(pid, os.WNOHANG)


def test_the_sandbox_holds_none_of_its_parents_sockets() -> None:
    """A worker's connections held open by its sandbox would not close when the worker
    is killed, and its callers would not see it lost."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    box = _sandbox.Sandbox(_model)
    box.start()
    try:
        kind, fds = box.run("fds", _in(30.0))
        assert kind == "ok"
        assert listener.fileno() not in fds
        assert len(fds) <= 6, fds  # stdin, stdout, stderr, its two pipes, listdir's own
    finally:
        box.stop()
        listener.close()


def test_the_sandbox_ends_when_its_replica_s_pipe_closes() -> None:
    box = _sandbox.Sandbox(_model)
    box.start()
    pid = box.pid
    os.close(box._to)  # as when the worker process dies
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    box.pid = 0
    os.close(box._from)


def test_only_a_cpu_replica_on_linux_has_a_sandbox() -> None:
    assert _sandbox.available(torch.device("cpu")) is (os.uname().sysname == "Linux")
    assert not _sandbox.available(torch.device("cuda", 0))  # CUDA does not survive a fork


def test_an_innocent_request_behind_a_poison_one_in_the_sandbox_is_answered() -> None:
    """A replica of a real model (one input kills the process computing it) with two
    isolated requests at once: the poison one ends the sandbox; the innocent one,
    waiting its turn, is answered by the next sandbox, not called poison too."""
    import cloudpickle

    from ft_notebook.serve._replica import Replica
    from ft_notebook.testing import poll_for
    from ft_notebook.testing.serving import POISON, poisoned_mlp

    replica = Replica("svc/0", "a", cloudpickle.dumps(poisoned_mlp), None)
    try:
        poll_for(lambda: replica.state == "ready", timeout=60, what="the replica built")
        assert replica.sandbox is not None
        first = replica.sandbox.pid
        poison = torch.zeros(2, 32)
        poison[0, 0] = POISON

        async def both() -> list[dict[str, Any]]:
            calls = [replica.predict(x, isolated=True) for x in (poison, torch.ones(2, 32))]
            return await asyncio.gather(*calls)

        bad, good = asyncio.run(both())
        assert bad["status"] == "poisoned", bad
        assert "killed by SIGKILL" in bad["error"]
        assert good["status"] == "OK", good
        assert replica.sandbox.pid not in (0, first)  # a new sandbox answered
        assert replica.state == "ready"  # and the replica never met the poison
        last = replica.sandbox.pid
    finally:
        replica.close()
    with pytest.raises(ChildProcessError):  # closed: its sandbox ended and reaped
        os.waitpid(last, os.WNOHANG)


def test_a_model_that_computes_on_threads_in_the_replica_answers_in_the_sandbox() -> None:
    """The parent's OpenMP threads do not survive the fork: a 4096 x 4096 matmul in a
    fork of a process that had used two threads waited for them until its deadline."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        weight = torch.randn(1024, 1024)
        torch.mm(weight, weight)  # the replica's threads, up and used

        def call(x: Any) -> Any:
            return torch.mm(x, weight)

        box = _sandbox.Sandbox(call)
        box.start()
        try:
            kind, y = box.run(torch.ones(512, 1024), _in(20.0))
            assert kind == "ok", kind
            torch.testing.assert_close(y, torch.mm(torch.ones(512, 1024), weight))
        finally:
            box.stop()
    finally:
        torch.set_num_threads(before)


def test_a_sandbox_that_died_idle_is_no_poison(sandbox) -> None:
    """Killed while it waited (the kernel's OOM killer takes it first): the next
    request is told there is no sandbox, not that it killed one."""
    os.kill(sandbox.pid, signal.SIGKILL)
    poll_for(lambda: _gone(sandbox.pid), timeout=10, what="the sandbox's end")
    assert sandbox.run(torch.zeros(1, 3), _in(30.0)) == ("absent",)
    sandbox.start()
    assert sandbox.run(torch.zeros(1, 3), _in(30.0))[0] == "ok"


def _gone(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] == "Z"  # a zombie: ended, not reaped


def test_an_answer_that_cannot_travel_is_the_models_error_not_poison(sandbox) -> None:
    kind, text, _ = sandbox.run("lock", _in(30.0))
    assert kind == "raised"
    assert "could not be sent back" in text
    assert sandbox.running


def test_stop_during_a_run_ends_it_at_once_and_leaves_no_process(sandbox, tmp_path) -> None:
    pid = sandbox.pid
    inside = tmp_path / "inside"
    done: list[tuple[Any, ...]] = []
    runner = threading.Thread(target=lambda: done.append(sandbox.run(f"hang:{inside}", _in(60.0))))
    runner.start()
    poll_for(inside.exists, timeout=10, what="the request in the sandbox")
    started = time.monotonic()
    sandbox.stop()
    runner.join(timeout=10)
    assert done == [("absent",)]  # closing: not a poison request
    assert time.monotonic() - started < 5
    assert not sandbox.running
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    sandbox.start()  # stopped for good
    assert not sandbox.running
