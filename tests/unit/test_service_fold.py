"""One fold of a service's events: pure, idempotent, and what the dashboard and the
JupyterLab panel both read of a service."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from ft_notebook._traffic_series import BUCKET_S, MAX_WINDOWS
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
    ServiceTraffic,
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


def _window(caller: str, end: float, requests: int, p99_s: float | None, **more: object) -> Any:
    data = dict(caller=caller, start=end - 2.0, end=end, requests=requests, p99_s=p99_s)
    return ServiceTraffic(**{**data, **more})  # type: ignore[arg-type]


def test_two_callers_windows_sum_by_bucket_and_the_p99_is_the_slowest_callers(
    isolated_data_dir: Path, unique_name: str
) -> None:
    """A notebook and the Jupyter server call one service: the series is both."""
    name, topic = unique_name, service_topic(unique_name)
    publish(ServiceStarted(2), topic)
    t = 1_000_000.0  # a bucket boundary
    windows = [
        _window("nb:1:1", t + 2.1, 200, 0.010, by_replica={f"{name}/0": 150, f"{name}/1": 50}),
        _window("lab:2:1", t + 2.5, 40, 0.030, fallback=4, failed=2),
        _window("nb:1:1", t + 4.1, 100, 0.012, by_replica={f"{name}/0": 100}),
    ]
    for w in windows:
        publish(w, topic)
    view = _fold(history(topic), name)
    assert [p.time for p in view.traffic] == [t + BUCKET_S, t + 2 * BUCKET_S]
    both, alone = view.traffic
    assert both.requests_per_s == pytest.approx(200 / 2 + 40 / 2)  # summed, not the last
    assert both.p99_s == pytest.approx(0.030)  # the slower caller's
    assert (both.fallback_per_s, both.failed_per_s) == (pytest.approx(2.0), pytest.approx(1.0))
    assert both.callers["nb:1:1"].answered == 200
    assert alone.requests_per_s == pytest.approx(50.0)
    assert set(alone.callers) == {"nb:1:1"}
    # a replay adds nothing; a caller's second window in a bucket is its mean rate
    assert _fold([*history(topic), *history(topic)], name).traffic == view.traffic
    again = view.apply(
        Event(
            topic,
            ServiceTraffic.kind,
            seq=99,
            time=t,
            data={"caller": "nb:1:1", "start": t + 4.1, "end": t + 5.1, "requests": 300},
        )
    )
    assert again.traffic[1].requests_per_s == pytest.approx((100 + 300) / (2 + 1))


def test_the_series_keeps_the_newest_windows_and_a_name_used_again_starts_it_over() -> None:
    topic = service_topic("s")
    view = ServiceView("s").apply(
        Event(topic, ServiceStarted.kind, seq=1, time=0.0, data={"wanted": 1})
    )
    for i in range(MAX_WINDOWS + 60):
        end = 1000.0 + BUCKET_S * i + 0.5
        view = view.apply(
            Event(
                topic,
                ServiceTraffic.kind,
                seq=i + 2,
                time=end,
                data={"caller": "a", "start": end - 2, "end": end, "requests": i + 1},
            )
        )
    assert len(view.traffic) == MAX_WINDOWS
    assert view.traffic[-1].requests_per_s == pytest.approx((MAX_WINDOWS + 60) / 2)
    assert view.traffic[0].time == 1000.0 + BUCKET_S * 60  # the oldest 60 went
    # a window older than every bucket kept would go at once: it changes nothing
    old = {"caller": "b", "start": 998.0, "end": 1000.5, "requests": 5}
    late = view.apply(Event(topic, ServiceTraffic.kind, seq=10_000, time=1.0, data=old))
    assert late.traffic == view.traffic
    restarted = view.apply(
        Event(topic, ServiceStarted.kind, seq=10_001, time=2.0, data={"wanted": 1})
    )
    assert restarted.traffic == ()


def test_old_journals_without_traffic_fold_and_odd_windows_change_nothing(
    isolated_data_dir: Path, unique_name: str
) -> None:
    name, topic = unique_name, service_topic(unique_name)
    events = _a_service(name)  # a journal written before the kind existed
    view = _fold(events, name)
    assert (view.traffic, view.wanted) == ((), 3)
    odd = [
        {"caller": "a", "start": 5.0, "end": 1.0, "requests": 3},  # ends before it starts
        {"caller": "a", "start": 0.0, "end": 2.0, "requests": -1},
        {"caller": "a", "start": 0.0, "end": "later", "requests": 1},
        {"caller": "a", "start": 0.0, "end": 2.0, "requests": 1, "by_replica": [1]},
        {"caller": "a", "start": 0.0, "end": float("nan"), "requests": 1},
        {"caller": "a", "end": 2.0, "requests": 1},  # a field missing
    ]
    seq = view.last_seq
    for i, data in enumerate(odd, start=1):
        after = view.apply(Event(topic, ServiceTraffic.kind, seq=seq + i, time=3.0, data=data))
        assert (after.traffic, after.last_seq) == ((), seq + i), data
