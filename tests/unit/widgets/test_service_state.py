"""A service dashboard: the service's events through the one fold, this caller's
router snapshots beside them: tiles, tier, rates."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from ft_notebook.events import (
    Event,
    EventPayload,
    Health,
    HealthChanged,
    ReplicaLost,
    ReplicaReady,
    ServiceStarted,
    WorkerLost,
    service_topic,
)
from ft_notebook.widgets import ServiceState


def event(seq: int, payload: EventPayload, name: str = "m") -> Event:
    data = {
        k: v.value if isinstance(v, enum.Enum) else v
        for k, v in dataclasses.asdict(payload).items()  # type: ignore[call-overload]
    }
    return Event(service_topic(name), payload.kind, seq=seq, time=float(seq), data=data)


def started(name: str = "m") -> list[Event]:
    return [
        event(1, ServiceStarted(2), name),
        event(2, ReplicaReady(f"{name}/0", "0", "tcp://a", 0.5), name),
        event(3, ReplicaReady(f"{name}/1", "1", "tcp://b", 0.5), name),
        event(4, HealthChanged(Health.HEALTHY, Health.FALLBACK, "2 of 2 replicas ready"), name),
    ]


def router(requests: int, fallback: int, tier: str, lost: bool = False) -> dict[str, Any]:
    routed = [
        {
            "replica": "m/0",
            "breaker": "CLOSED",
            "inflight": 2,
            "served": requests - fallback,
            "errors": 1,
            "p50_s": 0.004,
            "p99_s": 0.012,
        }
    ]
    if not lost:
        routed.append(
            {
                "replica": "m/1",
                "breaker": "CLOSED",
                "inflight": 0,
                "served": 0,
                "errors": 0,
                "p50_s": None,
                "p99_s": None,
            }
        )
    return {
        "tier": tier,
        "reason": f"{tier} because",
        "replicas": routed,
        "requests": requests,
        "fallback": fallback,
        "answered": requests,
        "p50_s": 0.004,
        "p99_s": 0.012,
    }


def test_events_and_snapshots_fold_into_tiles_a_tier_and_rates_between_them() -> None:
    state = ServiceState("m")
    for e in started():
        state.add(e)
    assert (state.tier, state.reason) == ("HEALTHY", "2 of 2 replicas ready")  # no snapshot yet
    state.apply(router(100, 0, "HEALTHY"), now=10.0)
    assert state.series == []  # a rate needs two snapshots
    assert [(t.replica, t.state, t.breaker) for t in state.tiles.values()] == [
        ("m/0", "READY", "CLOSED"),
        ("m/1", "READY", "CLOSED"),
    ]
    state.add(event(5, ReplicaLost("m/1", "1", "tcp://b", "worker 1 lost: process gone")))
    state.add(event(6, HealthChanged(Health.DEGRADED, Health.HEALTHY, "1 of 2 replicas ready")))
    state.add(event(7, WorkerLost("1", "tcp://b")))  # not a service kind: no change
    state.apply(router(300, 50, "DEGRADED", lost=True), now=12.0)
    (_, rps, p50, p99, share) = state.series[-1]
    assert (rps, p50, p99, share) == (100.0, 4.0, 12.0, 0.25)
    assert state.tier == "DEGRADED"  # the caller's tier, with the caller's reason
    assert state.tiles["m/1"].state == "LOST"
    assert state.tiles["m/1"].breaker == ""  # no longer routed here
    assert [h for _, h, _ in state.view.transitions] == [Health.HEALTHY, Health.DEGRADED]
    text = state.text()
    assert "service 'm': DEGRADED (DEGRADED because)" in text
    assert "1 of 2 replicas ready" in text
    assert "25% answered by the fallback" in text
    assert "<svg" not in state.html()  # one point is no line
    state.apply(router(400, 50, "DEGRADED", lost=True), now=13.0)
    assert state.series[-1][1:] == (100.0, 4.0, 12.0, 0.0)
    html = state.html()
    assert html.count('class="ft-replica"') == 2
    assert "worker 1 lost: process gone" in html
    assert "<svg" in html


def test_a_replica_scaled_away_leaves_the_dashboard() -> None:
    from ft_notebook.events import ServiceScaled

    state = ServiceState("m")
    for e in [*started(), event(5, ServiceScaled(1, 2))]:
        state.add(e)
    assert list(state.tiles) == ["m/0"]
    # a late event of the replica scaled away does not bring it back
    state.add(event(6, ReplicaLost("m/1", "1", "tcp://b", "scaled down")))
    assert list(state.tiles) == ["m/0"]


def test_reasons_and_causes_are_escaped_in_html() -> None:
    state = ServiceState("m")
    for e in started():
        state.add(e)
    state.add(event(5, ReplicaLost("m/1", "1", "tcp://b", "<img src=x onerror=alert(2)>")))
    snap = router(1, 0, "DEGRADED", lost=True)
    snap["reason"] = "<script>alert(1)</script>"
    state.apply(snap, now=1.0)
    html = state.html()
    assert "<script>" not in html
    assert "<img" not in html
    assert "&lt;script&gt;" in html
    assert "&lt;img" in html
