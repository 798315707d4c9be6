"""A closed loop of callers against a service, and a small model to serve: shared by
the serving tests and ``benchmarks/bench_serve.py``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

IN, HIDDEN, OUT = 32, 64, 4


def small_mlp() -> Any:
    """The model every replica builds: the same weights on every worker (seeded)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT)
    )


def slowly_built_mlp() -> Any:
    """``small_mlp``'s seeded kind of factory, taking its time between layers as a big
    model's initialisation does (the other threads of the worker run meanwhile)."""
    import torch

    torch.manual_seed(0)
    layers: list[Any] = []
    for size_in, size_out in ((IN, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, OUT)):
        layers += [torch.nn.Linear(size_in, size_out), torch.nn.ReLU()]
        time.sleep(0.05)
    return torch.nn.Sequential(*layers[:-1])


def inputs(n: int, batch: int = 4, seed: int = 1) -> list[Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, IN, generator=gen) for _ in range(n)]


def popularity(x: Any) -> str:
    """A fallback that needs no model: the same answer for everyone."""
    return "most-popular"


@dataclass
class Outcome:
    index: int
    answer: Any = None  # an Answer, when the call returned
    error: BaseException | None = None
    seconds: float = 0.0
    started: float = 0.0


@dataclass
class LoopResult:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def errors(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error is not None]

    @property
    def answers(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error is None]


def closed_loop(
    call: Callable[[Any], Any],
    xs: list[Any],
    *,
    callers: int = 8,
    after: dict[int, Callable[[], Any]] | None = None,
) -> LoopResult:
    """Send every ``xs[i]`` through ``call`` from ``callers`` threads, each sending its
    next request when its last is answered. ``after[k]`` runs (in its own thread) once
    ``k`` requests have been answered: the place to inject a fault mid-loop."""
    result = LoopResult([Outcome(i) for i in range(len(xs))])
    lock, next_index, done = threading.Lock(), [0], [0]
    hooks = dict(after or {})
    fired: list[threading.Thread] = []

    def worker() -> None:
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(xs):
                return
            outcome = result.outcomes[i]
            outcome.started = time.perf_counter()
            try:
                outcome.answer = call(xs[i])
            except Exception as e:
                outcome.error = e
            outcome.seconds = time.perf_counter() - outcome.started
            with lock:
                done[0] += 1
                hook = hooks.pop(done[0], None)
            if hook is not None:
                thread = threading.Thread(target=hook, daemon=True)
                thread.start()
                fired.append(thread)

    with ThreadPoolExecutor(callers) as pool:
        for f in [pool.submit(worker) for _ in range(callers)]:
            f.result()
    for thread in fired:
        thread.join(60)
    return result


#: A first input value that makes :func:`poisoned_mlp` kill its own worker process.
POISON = 12345.0
#: A first input value on which :func:`poisoned_mlp` raises MemoryError.
HUNGRY = -12345.0


def poisoned_mlp() -> Any:
    """``small_mlp``, except on two inputs: one whose first value is :data:`POISON`
    kills the worker process computing it (a crash on the input, as a native library
    can), one whose first value is :data:`HUNGRY` raises MemoryError."""
    import os
    import signal

    import torch

    class Poisoned(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = small_mlp()

        def forward(self, x: Any) -> Any:
            first = float(x.reshape(-1)[0])
            if first == POISON:
                os.kill(os.getpid(), signal.SIGKILL)
            if first == HUNGRY:
                raise MemoryError("Unable to allocate 61.0 GiB for an array")
            return self.inner(x)

    return Poisoned()


def deployed_broken_mlp() -> Any:
    """A model that passes its health check (an input of zeros) and raises on every
    other input: broken after deployment, whoever calls it."""
    import torch

    class Broken(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = small_mlp()

        def forward(self, x: Any) -> Any:
            if bool(x.any()):
                raise ValueError("weights file truncated: layer 2 has no bias")
            return self.inner(x)

    return Broken()
