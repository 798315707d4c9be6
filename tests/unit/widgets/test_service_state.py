"""A service dashboard folds Service.status() snapshots: tiles, tier, rates."""

from __future__ import annotations

from typing import Any

from ft_notebook.widgets import ServiceState


def status(requests: int, fallback: int, tier: str, lost: bool = False) -> dict[str, Any]:
    rows = [
        {"replica": "m/0", "worker": "0", "state": "ready", "cause": ""},
        {
            "replica": "m/1",
            "worker": "1",
            "state": "lost" if lost else "ready",
            "cause": "worker 1 lost: process gone" if lost else "",
        },
    ]
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
        "name": "m",
        "wanted": 2,
        "health": tier,
        "reason": "",
        "replicas": rows,
        "router": {
            "tier": tier,
            "reason": f"{tier} because",
            "replicas": routed,
            "requests": requests,
            "fallback": fallback,
            "answered": requests,
            "p50_s": 0.004,
            "p99_s": 0.012,
        },
    }


def test_snapshots_fold_into_tiles_a_tier_and_rates_between_them() -> None:
    state = ServiceState("m")
    state.apply(status(100, 0, "HEALTHY"), now=10.0)
    assert state.series == []  # a rate needs two snapshots
    assert [(t.replica, t.state, t.breaker) for t in state.tiles.values()] == [
        ("m/0", "READY", "CLOSED"),
        ("m/1", "READY", "CLOSED"),
    ]
    state.apply(status(300, 50, "DEGRADED", lost=True), now=12.0)
    (_, rps, p50, p99, share) = state.series[-1]
    assert (rps, p50, p99, share) == (100.0, 4.0, 12.0, 0.25)
    assert state.tier == "DEGRADED"
    assert state.tiles["m/1"].state == "LOST"
    assert state.tiles["m/1"].breaker == ""  # no longer routed here
    text = state.text()
    assert "service 'm': DEGRADED (DEGRADED because)" in text
    assert "25% answered by the fallback" in text
    assert "<svg" not in state.html()  # one point is no line
    state.apply(status(400, 50, "DEGRADED", lost=True), now=13.0)
    assert state.series[-1][1:] == (100.0, 4.0, 12.0, 0.0)
    html = state.html()
    assert html.count('class="ft-replica"') == 2
    assert "worker 1 lost: process gone" in html
    assert "<svg" in html


def test_a_replica_scaled_away_leaves_the_dashboard() -> None:
    state = ServiceState("m")
    state.apply(status(10, 0, "HEALTHY"), now=1.0)
    one = status(20, 0, "HEALTHY")
    one["replicas"] = one["replicas"][:1]
    state.apply(one, now=2.0)
    assert list(state.tiles) == ["m/0"]


def test_names_and_reasons_are_escaped_in_html() -> None:
    state = ServiceState("<m>")
    snap = status(1, 0, "HEALTHY")
    snap["router"]["reason"] = "<script>alert(1)</script>"
    state.apply(snap, now=1.0)
    assert "<script>" not in state.html()
    assert "&lt;script&gt;" in state.html()
