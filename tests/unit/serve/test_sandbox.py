"""A suspect request run in a real fork of this process (:mod:`ft_notebook.serve._sandbox`):
the child's answer, its exception, its MemoryError, its death and its silence each come
back as what they were, and this process is untouched by any of them."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
import torch

from ft_notebook.serve import _sandbox

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
    with torch.inference_mode():
        return MODEL(x)


def _run(x: Any, timeout_s: float = 30.0) -> tuple[Any, ...]:
    return _sandbox.collect(_sandbox.fork(_model, x), timeout_s)


def test_the_fork_answers_with_the_model_it_shares_with_its_parent() -> None:
    x = torch.arange(6.0).reshape(2, 3)
    kind, y = _run(x)
    assert kind == "ok"
    with torch.inference_mode():
        assert torch.equal(y, MODEL(x))


def test_an_input_that_kills_the_fork_kills_only_the_fork() -> None:
    me = os.getpid()
    assert _run("die") == ("died", "killed by SIGKILL")
    assert _run("exit") == ("died", "exit code 3")
    assert os.getpid() == me  # and we are here to say so
    assert _run(torch.zeros(1, 3))[0] == "ok"  # the model still answers after


def test_the_models_exceptions_come_back_as_the_callers() -> None:
    kind, text, trace = _run("raise")
    assert (kind, text) == ("raised", "ValueError: no such input")
    assert "no such input" in trace
    assert _run("memory") == ("memory", "MemoryError: Unable to allocate 61.0 GiB")


def test_a_fork_that_does_not_answer_in_time_is_killed_and_reaped() -> None:
    started = time.monotonic()
    child = _sandbox.fork(_model, "hang")
    assert _sandbox.collect(child, 0.5) == ("late", 0.5)
    assert time.monotonic() - started < 10
    with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
        os.waitpid(child.pid, os.WNOHANG)


def test_only_a_cpu_replica_on_linux_forks() -> None:
    assert _sandbox.available(torch.device("cpu")) is (os.uname().sysname == "Linux")
    assert not _sandbox.available(torch.device("cuda", 0))  # CUDA does not survive a fork
