"""A replica: one model of one service on one worker, and the worker handlers that reach it.

The service coordinator starts replicas (``ft_serve_start``) and asks how they are
(``ft_serve_state``); callers' routers send requests (``ft_serve_predict``) and pings
(``ft_serve_ping``) straight to the worker, not through the scheduler. Handlers run on
the worker's event loop and return at once: the model is built and called in the
replica's own thread, so a long model call stops neither the worker's heartbeats nor
the replica's pings (a busy replica is slow, not dead; a hung process answers nothing).

An exception the model raises is the caller's (``rejected``: the input was wrong),
running out of memory on the input included. But a model that raises on
:data:`FAILING_AFTER` calls in a row, whoever sent them, is broken, not its inputs: the
replica tells the service coordinator, which makes the service DEGRADED with the
error, until a call succeeds again.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol.serialize import to_serialize

from ft_notebook._random import DRAWS
from ft_notebook.serve import _sandbox

PLUGIN_NAME = "ft-notebook-replicas"

#: Replicas of this worker process, by key ("service/index").
_REPLICAS: dict[str, Replica] = {}
_LOCK = threading.Lock()
#: Calls in a row the model raised on, with no success between, that make a replica failing.
FAILING_AFTER = 10
#: This process's worker (the plugin's setup), to tell the scheduler of a failing model.
_WORKER: list[Any] = []


class Replica:
    def __init__(self, key: str, incarnation: str, factory: bytes, example: bytes | None) -> None:
        self.key, self.incarnation = key, incarnation
        self._factory, self._example = factory, example
        self.state, self.error = "warming", ""
        self.started, self.warmup_s = time.time(), 0.0
        self.inflight = self.served = 0
        #: calls the model raised on since its last success, and whether that was told
        self.failures, self.told_failing = 0, False
        self.model: Any = None
        self.device: Any = None
        self.slow_s, self.slow_fraction = 0.0, 0.0
        self._rng = random.Random(key)
        # one model call at a time: a model is rarely safe to call from two threads
        self.executor = ThreadPoolExecutor(1, thread_name_prefix=f"ft-notebook-replica-{key}")
        #: a fork for the requests that may be poison (see _sandbox; None: cannot fork),
        #: and the thread that waits on it, so that the model's thread never does
        self.sandbox: _sandbox.Sandbox | None = None
        self.isolating = ThreadPoolExecutor(1, thread_name_prefix=f"ft-notebook-sandbox-{key}")
        self.executor.submit(self._build)

    def _build(self) -> None:
        try:
            import cloudpickle

            # one factory at a time per worker, beside training ranks too: one that seeds
            # torch's global generator (torch.manual_seed(0); nn.Linear(...)) would
            # otherwise draw its weights interleaved with another's, and serve other
            # weights than the notebook's, silently (see ft_notebook._random)
            with DRAWS:
                model = cloudpickle.loads(self._factory)()
                self.model, self.device = _placed(model)
            if self._example is not None:  # the health check: one real call
                self._call(cloudpickle.loads(self._example))
            if _sandbox.available(self.device):
                self.sandbox = _sandbox.Sandbox(self._call)
                self.sandbox.start()
            self.state = "ready"
        except BaseException as e:
            self.state = "failed"
            self.error = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
        self.warmup_s = time.time() - self.started

    def _call(self, x: Any) -> Any:
        if self.slow_s and self._rng.random() < self.slow_fraction:
            time.sleep(self.slow_s)  # %ft chaos slow: a drill, not a model
        if self.device is None:
            return self.model(x)
        import torch

        with torch.inference_mode():
            out = self.model(_to_device(x, self.device))
        return _to_cpu(out)

    async def predict(
        self, x: Any, *, isolated: bool = False, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        if isolated and self.sandbox is not None:
            deadline = time.monotonic() + timeout_s  # from its arrival, not its turn
            answer = await self._predict_isolated(self.sandbox, x, deadline)
            if answer is not None:
                return answer
        self.inflight += 1
        try:
            loop = asyncio.get_running_loop()
            y = await loop.run_in_executor(self.executor, self._call, x)
        except MemoryError as e:
            # the caller's: this input needs more memory than the replica has; the
            # replica is fine (if it dies after all, the router sees it lost)
            return {
                "status": "rejected",
                "error": f"{type(e).__name__}: {e} (the model ran out of memory on this input)",
            }
        except Exception as e:
            self._failed(f"{type(e).__name__}: {e}")
            return {
                "status": "rejected",
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc(),
            }
        finally:
            self.inflight -= 1
        self._succeeded()
        return {"status": "OK", "y": to_serialize(y)}

    def _succeeded(self) -> None:
        self.served += 1
        if self.told_failing:
            self._tell("")
        self.failures, self.told_failing = 0, False

    async def _predict_isolated(
        self, sandbox: _sandbox.Sandbox, x: Any, deadline: float
    ) -> dict[str, Any] | None:
        """``x`` run in this replica's sandbox (see :mod:`._sandbox`): a crash on it
        ends the sandbox, and this replica serves on, and forks another. None when no
        sandbox would start: run it here, as a replica without one does."""
        loop = asyncio.get_running_loop()
        self.inflight += 1
        try:
            outcome: tuple[Any, ...] = ("absent",)
            for _ in range(3):  # the one before may end it while this one waits its turn
                if not sandbox.running:  # the last one died on a request: fork another
                    await loop.run_in_executor(self.executor, sandbox.start)
                outcome = await loop.run_in_executor(self.isolating, sandbox.run, x, deadline)
                if outcome[0] != "absent":
                    break
        except RuntimeError:  # the replica closed under it: its executors are shut
            return {"status": "not-ready", "error": f"replica {self.key} is closed"}
        finally:
            self.inflight -= 1
        kind = outcome[0]
        if kind in ("died", "late") and self.state == "ready":  # off this request's path
            self.executor.submit(sandbox.start)
        if kind == "ok":
            self._succeeded()
            return {"status": "OK", "y": to_serialize(outcome[1]), "isolated": True}
        if kind == "memory":
            error = f"{outcome[1]} (the model ran out of memory on this input)"
            return {"status": "rejected", "error": error, "isolated": True}
        if kind == "raised":
            self._failed(outcome[1])
            return {"status": "rejected", "error": outcome[1], "traceback": outcome[2]}
        if kind == "died":
            error = f"the sandbox of replica {self.key} that ran it alone was {outcome[1]}"
            return {"status": "poisoned", "error": error}
        if kind == "late":
            return {"status": "late", "error": "no answer by its deadline, run alone"}
        return None

    def _failed(self, error: str) -> None:
        self.failures += 1
        if self.failures >= FAILING_AFTER and not self.told_failing:
            self.told_failing = True
            self._tell(f"the model raised on its last {self.failures} calls ({error[:300]})")

    def _tell(self, error: str) -> None:
        """Tell the coordinator this replica's model fails every call ("": no more)."""
        if not _WORKER:
            return
        from ft_notebook.serve._protocol import SCHEDULER_HANDLER, ServiceAction

        name = self.key.rsplit("/", 1)[0]
        handler = getattr(_WORKER[0].scheduler, SCHEDULER_HANDLER)
        call = handler(
            action=ServiceAction.FAILING.value,
            name=name,
            replica=self.key,
            incarnation=self.incarnation,
            error=error,
        )
        task = asyncio.ensure_future(call)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def describe(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "incarnation": self.incarnation,
            "state": self.state,
            "error": self.error,
            "warmup_s": self.warmup_s,
            "inflight": self.inflight,
            "served": self.served,
            # whether a suspect request sent here runs in a fork (see _sandbox)
            "forks": self.state == "ready" and self.sandbox is not None,
        }

    def close(self) -> None:
        self.state = "closed"
        self.model = None
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.isolating.shutdown(wait=False, cancel_futures=True)
        if self.sandbox is not None:
            self.sandbox.stop()


def _placed(model: Any) -> tuple[Any, Any]:
    """A torch module goes to this worker's GPU, if it has one, in eval mode."""
    try:
        import torch
    except ImportError:
        return model, None
    if not isinstance(model, torch.nn.Module):
        return model, None
    device = (
        torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
    )
    model = model.to(device) if device is not None else model
    return model.eval(), device or torch.device("cpu")


def _to_device(x: Any, device: Any) -> Any:
    import numpy as np
    import torch

    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _to_cpu(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return out.detach().cpu()
    if isinstance(out, (tuple, list)):
        return type(out)(_to_cpu(o) for o in out)
    if isinstance(out, dict):
        return {k: _to_cpu(v) for k, v in out.items()}
    return out


# ---- worker handlers (the worker's event loop: return at once)


def start(key: str, incarnation: str, factory: bytes, example: bytes | None = None) -> str:
    with _LOCK:
        old = _REPLICAS.get(key)
        if old is not None and old.incarnation == incarnation and old.state != "closed":
            return "running"
        if old is not None:
            old.close()
        _REPLICAS[key] = Replica(key, incarnation, factory, example)
    return "started"


def state(key: str) -> dict[str, Any] | None:
    replica = _REPLICAS.get(key)
    return None if replica is None else replica.describe()


async def predict(
    key: str, incarnation: str, x: Any, isolated: bool = False, timeout_s: float = 60.0
) -> dict[str, Any]:
    """``isolated``: the request lost a replica under it; run it in a fork (if this
    replica can) so that, if it is what kills processes, it kills only the fork."""
    replica = _REPLICAS.get(key)
    if replica is None or replica.incarnation != incarnation or replica.state != "ready":
        found = "none" if replica is None else replica.state
        return {"status": "not-ready", "error": f"replica {key} is {found} on this worker"}
    return await replica.predict(x, isolated=isolated, timeout_s=timeout_s)


def ping(key: str) -> dict[str, Any]:
    replica = _REPLICAS.get(key)
    return {"state": "none"} if replica is None else replica.describe()


def stop(key: str) -> str:
    with _LOCK:
        replica = _REPLICAS.pop(key, None)
    if replica is None:
        return "none"
    replica.close()
    return "stopped"


def slow(key: str, seconds: float, fraction: float) -> str:
    replica = _REPLICAS.get(key)
    if replica is None:
        return "none"
    replica.slow_s, replica.slow_fraction = float(seconds), float(fraction)
    return "slowed" if seconds else "resumed"


_HANDLERS = {
    "ft_serve_start": start,
    "ft_serve_state": state,
    "ft_serve_predict": predict,
    "ft_serve_ping": ping,
    "ft_serve_stop": stop,
    "ft_serve_slow": slow,
}


class ReplicaHandlers(WorkerPlugin):
    """Adds the replica handlers to every worker, also those that join or restart."""

    name = PLUGIN_NAME
    idempotent = True

    def setup(self, worker: Any) -> None:
        worker.handlers.update(_HANDLERS)
        _WORKER[:] = [worker]

    def teardown(self, worker: Any) -> None:
        for key in list(_REPLICAS):
            stop(key)
