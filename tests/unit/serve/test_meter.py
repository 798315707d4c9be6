"""A caller's traffic meter on a real router, on its own event loop with the replicas'
answers scripted (no cluster): at most one window per ``window_s``, none while the
router is idle, windows that follow each other and add up to what was asked, and the
p99 of the window's answers, not of all of them."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest

from ft_notebook.events import ServiceTraffic
from ft_notebook.exceptions import RequestTooLarge
from ft_notebook.serve._meter import TrafficMeter
from ft_notebook.serve._rotation import ReplicaView
from ft_notebook.serve._router import Router
from ft_notebook.serve._service import _settings

pytestmark = pytest.mark.unit


def _router(took: list[float]) -> Router:
    """Two replicas that answer at once, each answer said to take the next of ``took``."""
    router = Router(None, "svc", _settings({"hedge_budget": 0.0}), None, 2)
    for i in range(2):
        row = {"replica": f"svc/{i}", "index": i, "worker": str(i), "address": f"a{i}"}
        router.views[f"svc/{i}"] = ReplicaView({**row, "incarnation": "x"}, 3, 1.0)
    latencies = itertools.cycle(took)

    def attempt(view: ReplicaView, x: Any, isolated_s: float | None = None) -> asyncio.Task[Any]:
        async def answer() -> tuple[dict[str, Any], float]:
            return {"status": "OK", "y": x}, next(latencies)

        return asyncio.ensure_future(answer())

    router._attempt = attempt  # type: ignore[method-assign]
    return router


def test_one_window_per_period_none_while_idle_and_they_add_up_to_the_calls() -> None:
    router = _router([0.001])
    sent: list[ServiceTraffic] = []
    meter = TrafficMeter(router, sent.append, window_s=0.2, caller="here:1:1")

    async def main() -> tuple[int, float, int]:
        await meter.start()
        began, calls = time.monotonic(), 0
        while time.monotonic() - began < 1.0:  # a second of traffic
            await router.call(calls)
            calls += 1
            await asyncio.sleep(0.002)
        with pytest.raises(RequestTooLarge):  # a failure counts too
            await _too_large(router)
        busy = time.monotonic() - began
        deadline = time.monotonic() + 5.0
        while sum(w.requests for w in sent) < calls and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the last busy window is published
        quiet = len(sent)
        await asyncio.sleep(0.6)  # three windows without a request
        assert len(sent) == quiet
        await meter.stop()
        return calls, busy, quiet

    calls, busy, quiet = asyncio.run(main())
    assert len(sent) == quiet  # stopping after quiet windows publishes nothing
    assert 3 <= len(sent) <= busy / 0.2 + 1, [(w.start, w.end) for w in sent]
    assert all(w.end - w.start >= 0.2 - 1e-3 for w in sent[:-1])  # throttled
    assert all(a.end == b.start for a, b in itertools.pairwise(sent))  # none overlap
    assert sum(w.requests for w in sent) == calls
    assert sum(sum(w.by_replica.values()) for w in sent) == calls
    assert sum(w.failed for w in sent) == 1
    assert {k for w in sent for k in w.by_replica} == {"svc/0", "svc/1"}  # least outstanding
    assert {w.caller for w in sent} == {"here:1:1"}
    assert all(w.p99_s == pytest.approx(0.001) for w in sent if w.by_replica)


async def _too_large(router: Router) -> None:
    router.settings = _settings({"max_request_bytes": 1})
    try:
        await router.call(b"x" * 64)
    finally:
        router.settings = _settings({"hedge_budget": 0.0})


def test_a_window_is_its_own_answers_and_stopping_publishes_the_last_one() -> None:
    """Slow answers in one window do not make the next window's p99."""
    router = _router([0.5])
    sent: list[ServiceTraffic] = []
    meter = TrafficMeter(router, sent.append, window_s=3600.0)  # only stop() ends it

    async def main() -> None:
        await meter.start()
        for i in range(100):
            await router.call(i)
        assert meter.window() is None  # not a window's length yet: nothing taken
        first = meter.window(final=True)
        assert first is not None
        sent.append(first)
        router._attempt = _router([0.002])._attempt  # type: ignore[method-assign]
        for i in range(50):
            await router.call(i)
        await meter.stop()
        await meter.stop()  # twice: nothing more

    asyncio.run(main())
    slow, fast = sent
    assert (slow.requests, slow.p50_s, slow.p99_s) == (100, 0.5, 0.5)
    assert (fast.requests, fast.p50_s, fast.p99_s) == (50, 0.002, 0.002)
    assert fast.start == slow.end
