"""A router's rotation: only the table's ready replicas are routed to, a replica whose
worker the coordinator reports lost leaves at once (the pushed event, read as its typed
payload), and each change of tier is kept with its reason."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from ft_notebook.events import Event, Health, service_topic
from ft_notebook.serve._protocol import ReplicaState
from ft_notebook.serve._rotation import Rotation
from ft_notebook.serve._router import Router
from ft_notebook.serve._service import _follow, _settings

pytestmark = pytest.mark.unit


def _row(i: int, state: ReplicaState) -> dict[str, Any]:
    return {
        "replica": f"svc/{i}",
        "index": i,
        "worker": f"w{i}",
        "address": f"tcp://a{i}",
        "state": state.value,
        "incarnation": f"inc{i}",
    }


def _table(version: int, *states: ReplicaState) -> dict[str, Any]:
    rows = [_row(i, s) for i, s in enumerate(states)]
    return {"version": version, "wanted": len(states), "replicas": rows}


def test_only_ready_replicas_are_routed_to_and_the_tier_follows() -> None:
    rotation = Rotation(None, "svc", _settings({}), 3)
    rotation.apply(_table(1, ReplicaState.READY, ReplicaState.WARMING, ReplicaState.READY))
    assert sorted(rotation.views) == ["svc/0", "svc/2"]
    assert rotation.tier is Health.DEGRADED
    rotation.apply(_table(2, ReplicaState.READY, ReplicaState.READY, ReplicaState.READY))
    assert rotation.tier is Health.HEALTHY
    rotation.apply(_table(1, *[ReplicaState.LOST] * 3))  # an older table: ignored
    assert len(rotation.views) == 3
    rotation.apply(_table(3, ReplicaState.LOST, ReplicaState.FAILED, ReplicaState.WAITING))
    assert rotation.views == {}
    assert [t["tier"] for t in rotation.transitions] == ["DEGRADED", "HEALTHY", "FALLBACK"]
    assert rotation.tier_reason == "0 of 3 replicas in rotation: replica table"


class _Loop:
    asyncio_loop: asyncio.AbstractEventLoop


class _Client:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = _Loop()
        self.loop.asyncio_loop = loop


def test_a_pushed_replica_lost_event_takes_its_replica_out_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    router = Router(None, "svc", _settings({}), None, 2)
    router.rotation.apply(_table(1, ReplicaState.READY, ReplicaState.READY))
    followed: list[Any] = []
    monkeypatch.setattr(
        "ft_notebook.events.subscribe", lambda topic, callback, via: followed.append(callback)
    )
    loop = asyncio.new_event_loop()
    try:
        _follow(_Client(loop), "svc", router)
        (on_event,) = followed
        lost = {"replica": "svc/1", "worker": "w1", "address": "tcp://a1", "cause": "w1 lost"}
        on_event(Event(service_topic("svc"), "replica-lost", 1, time.time() + 1, data=lost))
        loop.run_until_complete(asyncio.sleep(0))  # the router's loop runs the callback
    finally:
        loop.close()
    assert sorted(router.views) == ["svc/0"]
    assert router.tier is Health.DEGRADED
    assert router.tier_reason == "1 of 2 replicas in rotation: w1 lost"
