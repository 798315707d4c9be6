"""The MTBF an "auto" run plans with: the failures the cluster's journal recorded,
once there are enough of them, else ``ft-notebook.train.mtbf`` (issue 20)."""

from __future__ import annotations

from pathlib import Path

import dask.config
import pytest

from ft_notebook.events import Event, WorkerHung, WorkerJoined, WorkerLost, cluster_topic, publish
from ft_notebook.train.kernel._mtbf import FEWEST_FAILURES, WINDOW_S, journal_mtbf, planning_mtbf

pytestmark = pytest.mark.unit
HOUR = 3600.0


def _event(kind: str, name: str, at: float) -> Event:
    return Event(topic=cluster_topic(), kind=kind, time=at, data={"name": name})


def test_the_journal_s_rate_is_its_span_over_its_failures() -> None:
    now = 100 * HOUR
    events = [
        _event("worker-joined", "0", now - 12 * HOUR),  # the journal begins here
        _event("worker-lost", "0", now - 10 * HOUR),
        _event("worker-joined", "0", now - 9 * HOUR),
        _event("worker-lost", "1", now - 6 * HOUR),
        _event("worker-lost", "2", now - 1 * HOUR),
    ]
    made = journal_mtbf(events, now=now)
    assert made is not None
    assert made.seconds == pytest.approx(12 * HOUR / 3)
    assert "3 failures in 12 h" in made.source


def test_a_hang_then_a_loss_of_the_same_worker_is_one_failure_until_it_rejoins() -> None:
    now = 10 * HOUR
    events = [
        _event("worker-hung", "0", now - 9 * HOUR),
        _event("worker-lost", "0", now - 9 * HOUR + 60),  # the hung one, killed: the same
        _event("worker-lost", "1", now - 5 * HOUR),
        _event("worker-joined", "0", now - 4 * HOUR),
        _event("worker-hung", "0", now - 3 * HOUR),  # back, then hung again: a new one
    ]
    made = journal_mtbf(events, now=now)
    assert made is not None
    assert made.seconds == pytest.approx(9 * HOUR / 3)


def test_too_few_or_too_old_failures_are_not_planned_with() -> None:
    now = WINDOW_S + 50 * HOUR
    few = [_event("worker-lost", str(i), now - (i + 1) * HOUR) for i in range(FEWEST_FAILURES - 1)]
    assert journal_mtbf(few, now=now) is None
    old = [_event("worker-lost", str(i), now - WINDOW_S - (i + 1) * HOUR) for i in range(5)]
    assert journal_mtbf(old + few, now=now) is None  # the old ones are out of the window


def test_fit_s_mtbf_reads_the_real_journal_and_the_setting_turns_it_off(
    isolated_data_dir: Path,
) -> None:
    for name in ("0", "1"):
        publish(WorkerJoined(name=name, address=f"tcp://w{name}"), cluster_topic(), worker=name)
    publish(WorkerLost(name="0", address="tcp://w0"), cluster_topic(), worker="0")
    publish(
        WorkerHung(name="1", address="tcp://w1", heartbeat_age_s=60.0), cluster_topic(), worker="1"
    )
    two = planning_mtbf(None, 6 * HOUR, from_journal=True)
    assert (two.seconds, two.source) == (6 * HOUR, "ft-notebook.train.mtbf (6 h)")
    publish(WorkerJoined(name="0", address="tcp://w0b"), cluster_topic(), worker="0")
    publish(WorkerLost(name="0", address="tcp://w0b"), cluster_topic(), worker="0")
    three = planning_mtbf(None, 6 * HOUR, from_journal=True)
    assert three.source.startswith("the cluster's journal: 3 failures in ")
    assert three.seconds < 60  # the journal is seconds old: a cluster failing that often
    assert planning_mtbf(None, 6 * HOUR, from_journal=False).seconds == 6 * HOUR
    from ft_notebook.config import reload_config
    from ft_notebook.train.spec import FitSpec

    def from_journal() -> bool:
        spec = FitSpec(model=None, optimizer=None, loss=None, data=None, epochs=1, batch_size=1)
        return spec.mtbf_from_journal

    try:
        with dask.config.set({"ft-notebook.train.mtbf-from-journal": False}):
            reload_config()
            assert from_journal() is False
    finally:
        reload_config()
    assert from_journal() is True


def _drill(name: str, at: float) -> Event:
    return Event(
        topic=cluster_topic(), kind="published", time=at, data={"drill": "SIGKILL", "name": name}
    )


def test_failures_a_drill_caused_are_not_planned_with() -> None:
    """Three demos' drills made demo 04 plan with an MTBF of 114 s and checkpoint
    every 375 ms (issue 38): a rehearsal says nothing of how often machines fail."""
    now = 10 * HOUR
    drills = []
    for i, at in enumerate((now - 300, now - 200, now - 100)):
        drills += [_drill(f"cpu{i}", at), _event("worker-lost", f"cpu{i}", at + 0.1)]
        drills += [_event("worker-joined", f"cpu{i}", at + 3)]
    drills += [_drill("cpu0", now - 50), _event("worker-hung", "cpu0", now - 48)]
    drills += [_event("worker-lost", "cpu0", now - 47)]  # the hung one evicted: the drill's
    assert journal_mtbf(drills, now=now) is None
    # a real loss long after a drill of the same worker, and two others, are counted
    real = [_event("worker-lost", "cpu1", now - 9 * HOUR), _event("worker-lost", "cpu2", now - 20)]
    late = [_drill("cpu0", now - 9 * HOUR), _event("worker-lost", "cpu0", now - 8 * HOUR)]
    made = journal_mtbf(sorted(drills + real + late, key=lambda e: e.time), now=now)
    assert made is not None
    assert "3 failures in 9 h" in made.source
