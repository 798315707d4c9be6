"""Dashboards fold events into one state: live or replayed, widgets or text."""

from __future__ import annotations

from pathlib import Path

import pytest

from ft_notebook.events import (
    CheckpointCommitted,
    Event,
    Health,
    HealthChanged,
    RecoveryCompleted,
    RunProgress,
    RunStarted,
    RunState,
    RunStateChanged,
    SnapshotCommitted,
    history,
    publish,
    run_topic,
    session_topic,
)
from ft_notebook.testing import poll_for
from ft_notebook.widgets import DashboardState, LiveDashboard

pytestmark = pytest.mark.unit


def _workers(**states: str) -> tuple[dict[str, object], ...]:
    return tuple({"name": n, "state": s, "heartbeat_age_s": 0.1} for n, s in states.items())


def _a_run_with_a_failure(run: str) -> None:
    topic = run_topic(run)
    publish(RunStateChanged(RunState.RUNNING, RunState.PENDING, "3 workers"), topic, run=run)
    publish(
        RunProgress(
            4, 32, 0, 3, loss=1.5, workers=_workers(a="training", b="training", c="training")
        ),
        topic,
        step=4,
    )
    publish(CheckpointCommitted(checkpoint_step=8, nbytes=100), topic, step=8)
    publish(
        RunProgress(9, 32, 1, 3, loss=1.2, workers=_workers(a="training", b="training", c="lost")),
        topic,
        step=9,
    )
    publish(HealthChanged(Health.DEGRADED, Health.HEALTHY, "c lost"), topic, step=9)
    publish(RunStateChanged(RunState.RECOVERING, RunState.RUNNING, "c lost"), topic, step=9)
    publish(RecoveryCompleted("c: process gone", 0.041, 0, 3, 2), topic, step=9)
    publish(RunStateChanged(RunState.RUNNING, RunState.RECOVERING, "recovered"), topic, step=9)
    publish(
        RunProgress(
            14, 32, 1, 3, loss=0.9, workers=_workers(a="training", b="training", c="training")
        ),
        topic,
        step=14,
    )
    publish(HealthChanged(Health.HEALTHY, Health.DEGRADED, "3 workers"), topic, step=14)


def test_a_failure_and_its_recovery_as_the_dashboard_sees_them(
    isolated_data_dir: Path, unique_name: str
) -> None:
    _a_run_with_a_failure(unique_name)
    state = DashboardState(run=unique_name)
    badges, tile_c = [], []
    for event in history(run_topic(unique_name)):
        state.apply(event)
        badges.append(state.badge)
        tile_c.append(state.tiles["c"].state if "c" in state.tiles else None)
    assert "DEGRADED" in badges
    assert badges[-1] == "HEALTHY"
    assert badges.index("DEGRADED") < badges.index("RECOVERING") < len(badges) - 1
    assert tile_c[1] == "TRAINING"
    assert "LOST" in tile_c
    assert tile_c[-1] == "TRAINING"
    (recovery,) = state.recoveries
    assert recovery["rto_s"] == 0.041
    assert recovery["steps_lost"] == 0
    assert recovery["step"] == 9
    assert state.loss == [(4, 1.5), (9, 1.2), (14, 0.9)]
    assert state.checkpoints == [8]
    assert [m["kind"] for m in state.markers] == ["worker-lost", "recovery-completed"]
    text = state.text()
    assert "HEALTHY" in text
    assert "RTO 0.041 s" in text
    assert "c TRAINING" in text
    html = state.html()
    assert 'data-health="HEALTHY"' in html
    assert 'data-rto="0.041"' in html
    assert 'data-worker="c" data-state="TRAINING"' in html


def test_a_run_resumed_under_its_name_is_drawn_afresh(
    isolated_data_dir: Path, unique_name: str
) -> None:
    """A run resumed under a name used before showed the old run's tiles, markers and
    checkpoints, and hid its own loss points up to the old run's last step."""
    _a_run_with_a_failure(unique_name)
    topic = run_topic(unique_name)
    publish(RunStarted(total_steps=32), topic, run=unique_name)
    publish(RunStateChanged(RunState.RUNNING, RunState.PENDING, "2 workers"), topic)
    publish(RunProgress(3, 32, 0, 2, loss=2.0, workers=_workers(a="training", b="training")), topic)
    state = DashboardState(run=unique_name)
    for event in history(topic):
        state.apply(event)
    assert state.loss == [(3, 2.0)]
    assert sorted(state.tiles) == ["a", "b"]
    assert (state.markers, state.checkpoints, state.recoveries) == ([], [], [])
    assert state.badge == "HEALTHY"


def test_a_robust_run_shows_whom_its_aggregator_did_not_follow(
    isolated_data_dir: Path, unique_name: str
) -> None:
    """Suspects are run totals in each progress event: the row shows the newest."""
    topic = run_topic(unique_name)
    publish(RunStateChanged(RunState.RUNNING, RunState.PENDING, "4 workers"), topic)
    publish(RunProgress(5, 40, 0, 4, loss=2.0), topic, step=5)
    publish(RunProgress(10, 40, 0, 4, loss=1.0, suspects={"3": 9, "1": 1}), topic, step=10)
    publish(
        RunProgress(20, 40, 0, 3, loss=0.5, suspects={"3": 18, "1": 1}, mean_steps=4),
        topic,
        step=20,
    )
    state, lines = DashboardState(run=unique_name), []
    for event in history(topic):
        state.apply(event)
        lines.append(state.suspects_line())
    assert lines[:2] == ["", ""]  # no robust aggregator said anything yet: no row
    assert lines[2] == "suspect gradients: 3 in 9 of 10 steps, 1 in 1 of 10 steps"
    assert state.suspects == {"3": 18, "1": 1}
    assert state.mean_steps == 4
    assert "3 in 18 of 20 steps, 1 in 1 of 20 steps; 4 steps with the mean" in state.text()
    assert 'class="ft-suspects" data-worst="3" data-mean-steps="4"' in state.html()
    replayed = DashboardState(run=unique_name)
    for event in history(topic)[:2]:
        replayed.apply(event)
    assert 'class="ft-suspects"' not in replayed.html()


def test_an_event_is_folded_once_and_a_replay_gives_the_same_state(
    isolated_data_dir: Path, unique_name: str
) -> None:
    _a_run_with_a_failure(unique_name)
    events = history(run_topic(unique_name))
    once, twice = DashboardState(run=unique_name), DashboardState(run=unique_name)
    for e in events:
        once.apply(e)
    for e in events + events:
        twice.apply(e)
    assert once == twice
    assert not once.apply(Event.from_dict(events[3].to_dict()))  # seen already


def test_an_unknown_kind_changes_nothing() -> None:
    state = DashboardState(run="r")
    assert not state.apply(Event(topic="t", kind="something-new-happened", seq=1, data={"x": 1}))
    assert state.version == 0


def _snapshot_event(seq: int, name: str, **data: object) -> Event:
    """A snapshot-committed event as a journal holds it (``data`` as written then)."""
    data = {"name": name, "nbytes": 8_000_000, "variables": 3, "lost": [], **data}
    return Event(topic=session_topic(), kind=SnapshotCommitted.kind, seq=seq, data=data)


def test_a_dashboard_shows_the_snapshots_of_its_own_notebook_only(
    isolated_data_dir: Path, unique_name: str
) -> None:
    mine, theirs = f"{unique_name}-mine", f"{unique_name}-theirs"
    topic = session_topic()
    publish(SnapshotCommitted("before", 1024, 2, notebook=mine), topic)
    publish(SnapshotCommitted("latest", 2048, 5, ("gen",), notebook=mine), topic)
    publish(SnapshotCommitted("latest", 7_969_178, 40, notebook=theirs), topic)  # newest
    state = DashboardState(run=unique_name, notebook=mine)
    changed = [state.apply(e) for e in history(topic)]
    assert changed == [True, True, False]  # the other notebook's changed nothing
    assert state.snapshot_line().startswith("last snapshot 'latest' ")
    assert ", 2.0 KB, 5 variables, lost: gen" in state.snapshot_line()
    assert "7.6 MB" not in state.text()
    # a dashboard of the other notebook, over the same journal, sees the other way round
    other = DashboardState(run=unique_name, notebook=theirs)
    for e in history(topic):
        other.apply(e)
    assert ", 7.6 MB, 40 variables" in other.snapshot_line()


def test_a_dashboard_without_a_notebook_session_shows_no_snapshot() -> None:
    state = DashboardState(run="r")  # a kernel with no ``%load_ext ft_notebook``
    events = [
        _snapshot_event(1, "latest", notebook="analysis-1a2b3c4d"),
        _snapshot_event(2, "latest"),  # from a journal before notebooks were named
    ]
    assert [state.apply(e) for e in events] == [False, False]
    assert state.snapshot is None
    assert state.snapshot_line() == ""
    assert "snapshot" not in state.text()
    assert "snapshot" not in state.html()


def test_a_snapshot_event_that_names_no_notebook_is_not_shown() -> None:
    # from before snapshots named their notebook: it may be any notebook's
    state = DashboardState(run="r", notebook="analysis-1a2b3c4d")
    assert not state.apply(_snapshot_event(1, "latest"))
    assert state.snapshot_line() == ""
    assert state.apply(_snapshot_event(2, "latest", notebook="analysis-1a2b3c4d"))
    assert state.snapshot_line().startswith("last snapshot 'latest' ")


def test_a_live_dashboard_follows_events_and_renders_at_a_bounded_rate(
    isolated_data_dir: Path, unique_name: str
) -> None:
    live = LiveDashboard(
        [run_topic(unique_name), session_topic()],
        run=unique_name,
        title=f"run {unique_name}",
        max_rate=4.0,
        notebook="nb-1a2b3c4d",
    )
    try:
        _a_run_with_a_failure(unique_name)
        publish(SnapshotCommitted("nb", 2048, 5, ("gen",), notebook="nb-1a2b3c4d"), session_topic())
        publish(SnapshotCommitted("other", 4096, 9, notebook="other-4d3c2b1a"), session_topic())
        poll_for(
            lambda: live.view.badge.value.count('data-health="HEALTHY"') and live.state.snapshot,
            timeout=10,
            what="the dashboard caught up",
        )
        poll_for(
            lambda: "recovery" in live.view.recoveries.value and "nb" in live.view.snapshot.value,
            timeout=10,
            what="the widgets caught up",
        )
        assert 'data-rto="0.041"' in live.view.recoveries.value
        assert [t for t in live.view.tile_views] == ["a", "b", "c"]
        assert 'data-state="TRAINING"' in live.view.tile_views["c"].value
        assert "lost: gen" in live.view.snapshot.value
        assert "other" not in live.view.snapshot.value
        assert live.renders <= 6  # 12 events, at most 4 renders a second, plus the first
        bundle = live._repr_mimebundle_()
        assert "application/vnd.jupyter.widget-view+json" in bundle
        assert "RTO 0.041 s" in bundle["text/plain"]
    finally:
        live.close()
