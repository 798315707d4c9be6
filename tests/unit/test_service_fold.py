"""One fold of a service's events: pure, idempotent, and what the dashboard and the
JupyterLab panel both read of a service."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from ft_notebook.events import (
    Event,
    Health,
    HealthChanged,
    ReplicaFailed,
    ReplicaLost,
    ReplicaReady,
    ServiceClosed,
    ServiceScaled,
    ServiceStarted,
    history,
    publish,
    service_topic,
)
from ft_notebook.runfold import ReplicaFact, ServiceView

pytestmark = pytest.mark.unit


#: Reasons as the coordinator words them (``ft_notebook._reasons.explain``), and the
#: raw errors the events carry beside them.
LOST = "replica 1's worker w1 was lost (its process is gone or its connection closed)"
RAW = "worker w1 lost: process gone or connection closed"
BUILD = "replica 2's model raised ValueError (no GPU) while it was built on worker w2"


def _fold(events: list[Event], name: str) -> ServiceView:
    return functools.reduce(ServiceView.apply, events, ServiceView(name))


def _a_service(name: str) -> list[Event]:
    """A service that starts, loses a replica, fails one start, scales up and closes."""
    payloads = [
        ServiceStarted(2),
        ReplicaReady(f"{name}/0", "w0", "tcp://a", 0.25),
        ReplicaReady(f"{name}/1", "w1", "tcp://b", 0.5),
        HealthChanged(Health.HEALTHY, Health.FALLBACK, "2 of 2 replicas ready"),
        ReplicaLost(f"{name}/1", "w1", "tcp://b", LOST, "worker w1 lost: process gone"),
        HealthChanged(Health.DEGRADED, Health.HEALTHY, f"1 of 2 replicas ready: {LOST}", RAW),
        ServiceScaled(3, 2),
        ReplicaFailed(f"{name}/2", "w2", BUILD, "ValueError: no GPU\nTraceback ..."),
    ]
    for payload in payloads:
        publish(payload, service_topic(name))
    return history(service_topic(name))


def test_real_events_fold_into_the_service_they_describe(
    isolated_data_dir: Path, unique_name: str
) -> None:
    name = unique_name
    events = _a_service(name)
    view = _fold(events, name)
    assert (view.health, view.reason, view.detail, view.wanted, view.ready) == (
        Health.DEGRADED,
        f"1 of 2 replicas ready: {LOST}",
        RAW,
        3,
        1,
    )
    assert view.replica_rows() == [
        ReplicaFact(f"{name}/0", "w0", "ready", events[1].time, "", 0.25),
        ReplicaFact(
            f"{name}/1", "w1", "lost", events[4].time, LOST, 0.5, "worker w1 lost: process gone"
        ),
        ReplicaFact(
            f"{name}/2",
            "w2",
            "failed",
            events[7].time,
            BUILD,
            None,
            "ValueError: no GPU\nTraceback ...",
        ),
    ]
    assert [(h, why) for _, h, why in view.transitions] == [
        (Health.HEALTHY, "2 of 2 replicas ready"),
        (Health.DEGRADED, f"1 of 2 replicas ready: {LOST}"),
    ]
    assert view.last_seq == len(events)
    # the same events give an equal view, and a replay changes nothing
    assert _fold(events, name) == view
    assert functools.reduce(ServiceView.apply, events, view) is view


def test_a_name_used_again_starts_over(isolated_data_dir: Path, unique_name: str) -> None:
    name = unique_name
    _a_service(name)
    publish(ServiceClosed(), service_topic(name))
    closed = _fold(history(service_topic(name)), name)
    assert closed.closed
    publish(ServiceStarted(1), service_topic(name))
    again = _fold(history(service_topic(name)), name)
    assert (again.closed, again.wanted, again.health, again.transitions) == (False, 1, None, ())
    assert again.replica_rows() == [ReplicaFact(f"{name}/0")]  # waiting: no event yet


def test_a_scaled_away_replica_stays_away_and_unknown_or_odd_events_only_count() -> None:
    topic = service_topic("s")
    view = ServiceView("s").apply(
        Event(topic, ServiceStarted.kind, seq=1, time=1.0, data={"wanted": 1})
    )
    late = Event(
        topic,
        ReplicaLost.kind,
        seq=2,
        time=2.0,
        data={"replica": "s/4", "worker": "w", "address": "a", "cause": "scaled down"},
    )
    odd = Event(
        topic, ReplicaReady.kind, seq=3, time=3.0, data={"replica": "s/0"}
    )  # fields missing
    unknown = Event(topic, "replica-teleported", seq=4, time=4.0, data={})
    after = functools.reduce(ServiceView.apply, [late, odd, unknown], view)
    assert after.replicas == view.replicas
    assert (after.last_seq, after.updated) == (4, 4.0)


def test_a_replica_back_again_drops_the_reason_it_was_out_for() -> None:
    topic = service_topic("s")
    started = Event(topic, ServiceStarted.kind, seq=1, time=1.0, data={"wanted": 1})
    lost = Event(
        topic,
        ReplicaLost.kind,
        seq=2,
        time=2.0,
        data={"replica": "s/0", "worker": "w", "address": "a", "cause": LOST, "detail": RAW},
    )
    back = Event(
        topic,
        ReplicaReady.kind,
        seq=3,
        time=3.0,
        data={"replica": "s/0", "worker": "w", "address": "b", "warmup_s": 0.1},
    )
    out = ServiceView("s").apply(started).apply(lost)
    assert (out.replicas["s/0"].cause, out.replicas["s/0"].detail) == (LOST, RAW)
    again = out.apply(back)
    assert (again.replicas["s/0"].cause, again.replicas["s/0"].detail) == ("", "")
    # a journal written before events carried the detail still folds
    old = Event(
        topic,
        ReplicaLost.kind,
        seq=4,
        time=4.0,
        data={"replica": "s/0", "worker": "w", "address": "b", "cause": "worker w lost"},
    )
    assert again.apply(old).replicas["s/0"].detail == ""
