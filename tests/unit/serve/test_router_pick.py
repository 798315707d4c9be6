"""The router's pick: least outstanding, and a replica holding a call older than the
hedge time last, unless hedging is off for the service (``hedge_budget=0``)."""

from __future__ import annotations

import time

from ft_notebook.serve._rotation import ReplicaView
from ft_notebook.serve._router import Router
from ft_notebook.serve._service import _settings


def _router(**routing: float) -> Router:
    router = Router(None, "svc", _settings(routing), None, 2)
    for i in range(2):
        row = {"replica": f"svc/{i}", "index": i, "worker": str(i), "address": f"a{i}"}
        router.views[f"svc/{i}"] = ReplicaView({**row, "incarnation": "x"}, 3, 1.0)
    for _ in range(100):  # answers of about 5 ms: a hedge time of 5 ms
        router.latencies.add(0.005)
        router.counts["answered"] += 1
    now = time.monotonic()
    router.views["svc/0"].since = [now - 1.0]  # one call, a second old: stalled
    router.views["svc/0"].inflight = 1
    router.views["svc/1"].since = [now, now]  # two fresh calls
    router.views["svc/1"].inflight = 2
    return router


def test_a_replica_holding_a_stalled_call_is_picked_last() -> None:
    picked = _router(hedge_budget=0.05)._pick(set())
    assert picked is not None
    assert picked.key == "svc/1"


def test_with_hedging_off_the_pick_is_plain_least_outstanding() -> None:
    picked = _router(hedge_budget=0.0)._pick(set())
    assert picked is not None
    assert picked.key == "svc/0"
