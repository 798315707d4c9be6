"""One fold of a run's events: pure, idempotent, and the one source of a recovery for
the coordinator, the dashboard and the JupyterLab panel."""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from ft_notebook.events import (
    CheckpointCommitted,
    CheckpointFailed,
    Event,
    Health,
    HealthChanged,
    RecoveryCompleted,
    RolledBack,
    RunProgress,
    RunStarted,
    RunState,
    RunStateChanged,
    WorkerLost,
    history,
    publish,
    run_topic,
)
from ft_notebook.runfold import Recovery, RunView
from ft_notebook.server._manager import ResilienceManager
from ft_notebook.server._models import RecoveryModel
from ft_notebook.widgets import DashboardState

pytestmark = pytest.mark.unit

#: The keys ``run.info()["recoveries"]`` has listed since recoveries were recorded.
RECOVERY_KEYS = [
    "cause",
    "detected_at",
    "resumed_at",
    "rto_s",
    "steps_lost",
    "workers_before",
    "workers_after",
    "how",
    "generation",
    "step",
    "verified",
]


def _fold(events: list[Event], view: RunView | None = None) -> RunView:
    return functools.reduce(RunView.apply, events, view or RunView())


def _a_run(run: str) -> list[Event]:
    """A run that trains, checkpoints, loses a worker, recovers and fails a save."""
    topic = run_topic(run)
    recovery = Recovery(
        cause="c: worker lost",
        detected_at=1000.25,
        resumed_at=1000.75,
        rto_s=0.5,
        steps_lost=2,
        workers_before=3,
        workers_after=2,
        how="survive",
        generation=2,
        step=10,
        verified=True,
    )
    payloads = [
        RunStateChanged(RunState.RUNNING, RunState.PENDING, "3 workers"),
        RunProgress(8, 40, 0, 3, loss=1.5, samples_per_s=96.0, eta_s=30.0, state="RUNNING"),
        CheckpointCommitted(checkpoint_step=8, nbytes=100),
        HealthChanged(Health.DEGRADED, Health.HEALTHY, "c lost"),
        RunStateChanged(RunState.RECOVERING, RunState.RUNNING, "c: worker lost"),
        WorkerLost("c", "tcp://c"),  # not the view's: bookkeeping only
        recovery.as_payload(),
        RunStateChanged(RunState.RUNNING, RunState.RECOVERING, "recovered with 2 workers"),
        RunProgress(12, 40, 1, 2, loss=0.75, samples_per_s=64.0, eta_s=28.0, state="RUNNING"),
        CheckpointFailed(checkpoint_step=12, error="disk full", retry_at_step=16),
    ]
    for step, payload in enumerate(payloads):
        publish(payload, topic, run=run, step=step)
    return history(topic)


def test_real_events_fold_into_the_run_they_describe(
    isolated_data_dir: Path, unique_name: str
) -> None:
    events = _a_run(unique_name)
    view = _fold(events[:5])  # RECOVERING: the loss, not the health, says why
    assert (view.state, view.health, view.reason) == (
        RunState.RECOVERING,
        Health.DEGRADED,
        "c: worker lost",
    )
    view = _fold(events)
    assert (view.state, view.health, view.reason) == (
        RunState.RUNNING,
        Health.DEGRADED,
        "recovered with 2 workers",
    )
    assert (view.step, view.total_steps, view.epoch, view.world_size) == (12, 40, 1, 2)
    assert (view.loss, view.samples_per_s, view.eta_s) == (0.75, 64.0, 28.0)
    assert view.checkpoint_step == 8
    assert view.checkpoint_time == events[2].time
    assert view.lagging  # the save at 12 failed after the one at 8
    [recovery] = view.recoveries
    assert recovery == Recovery(
        "c: worker lost", 1000.25, 1000.75, 0.5, 2, 3, 2, "survive", 2, 10, True
    )
    assert view.seen == {run_topic(unique_name): 10}
    assert (view.last_seq, view.updated) == (10, events[-1].time)


def test_a_health_change_gives_its_reason_while_the_run_trains() -> None:
    topic = run_topic("r")
    running = RunView(state=RunState.RUNNING, reason="3 workers")
    data = {"health": "DEGRADED", "previous": "HEALTHY", "reason": "2 of 3 workers"}
    event = Event(topic, HealthChanged.kind, seq=1, time=5.0, data=data)
    assert running.apply(event).reason == "2 of 3 workers"
    stalled = dataclasses.replace(running, state=RunState.STALLED, reason="1 worker left")
    assert stalled.apply(event).reason == "1 worker left"


def test_progress_repeats_the_state_for_a_view_that_missed_its_change() -> None:
    topic = run_topic("r")

    def progress(seq: int, state: str) -> Event:
        data = {"step": seq, "total_steps": 9, "epoch": 0, "world_size": 2, "state": state}
        return Event(topic, RunProgress.kind, seq=seq, time=float(seq), data=data)

    running = RunView().apply(progress(1, "RUNNING"))
    assert (running.state, running.step) == (RunState.RUNNING, 1)
    # older events say nothing, newer versions may say what this one does not know
    later = _fold([progress(2, ""), progress(3, "PAUSED")], running)
    assert (later.state, later.step) == (RunState.RUNNING, 3)


def test_the_fold_is_pure_and_folds_each_event_once(
    isolated_data_dir: Path, unique_name: str
) -> None:
    events = _a_run(unique_name)
    assert _fold(events) == _fold(events)  # the same events, the same view
    assert _fold(events + events) == _fold(events)  # a replay changes nothing
    view = _fold(events[:4])
    before = copy.deepcopy(view)
    after = view.apply(events[4])
    assert view == before  # the old view is left as it was
    assert after.state is RunState.RECOVERING
    assert view.state is RunState.RUNNING
    assert after.apply(events[4]) is after  # seen by its sequence number
    assert after.apply(Event.from_dict(events[2].to_dict())) is after  # an older one too


def test_an_unknown_kind_or_unreadable_payload_moves_only_the_bookkeeping() -> None:
    topic = run_topic("r")
    view = RunView(state=RunState.RUNNING, step=3)
    new = Event(topic, "something-new-happened", seq=4, time=9.0, data={"state": "FAILED"})
    assert view.apply(new) == dataclasses.replace(view, seen={topic: 4}, updated=9.0)
    unreadable = [  # a newer version's state; a recovery missing its numbers
        Event(topic, RunStateChanged.kind, seq=5, time=9.5, data={"state": "PAUSED"}),
        Event(topic, RecoveryCompleted.kind, seq=6, time=9.75, data={"cause": "x"}),
    ]
    assert _fold(unreadable, view) == dataclasses.replace(view, seen={topic: 6}, updated=9.75)


def test_an_old_recovery_event_still_folds_from_its_envelope() -> None:
    old = {  # what recovery-completed carried before it carried a whole recovery
        "seq": 3,
        "topic": run_topic("r"),
        "kind": "recovery-completed",
        "time": 2000.5,
        "run": "r",
        "step": 41,
        "data": {
            "cause": "w1: lost",
            "rto_s": 0.5,
            "steps_lost": 1,
            "workers_before": 2,
            "workers_after": 1,
        },
    }
    [recovery] = RunView().apply(Event.from_dict(old)).recoveries
    assert recovery == Recovery(
        cause="w1: lost",
        detected_at=2000.0,
        resumed_at=2000.5,
        rto_s=0.5,
        steps_lost=1,
        workers_before=2,
        workers_after=1,
        how="",
        generation=0,
        step=41,
        verified=False,
    )
    dashboard = DashboardState(run="r")
    assert dashboard.apply(Event.from_dict(old))
    assert dashboard.recoveries == [recovery.as_dict()]
    assert "recovery at step 41: w1: lost; RTO 0.5 s" in dashboard.text()


def test_coordinator_dashboard_and_panel_read_one_recovery(
    isolated_data_dir: Path, unique_name: str
) -> None:
    from dataclasses import replace

    from ft_notebook.testing.books import running
    from ft_notebook.train.coordinator import _book
    from ft_notebook.train.coordinator._inputs import Reported
    from ft_notebook.train.coordinator._plugin import RunCoordinator
    from ft_notebook.train.protocol import Plan, Report

    # the book as a loss left it: generation 2 of the survivors, verified, recovering
    book, _ = running(3, name=unique_name)
    pending = _book.Pending("c: worker lost", 1000.125, 3, 12, ("c",))
    book = replace(
        book,
        plan=Plan(unique_name, 2, ("a", "b"), ("", 0), how="survive", incarnation="inc1"),
        gens=replace(book.gens, verified=frozenset({2})),
        recovery=replace(book.recovery, pending=pending),
    )
    coordinator = RunCoordinator()
    coordinator.runs[unique_name] = book
    resumed = Report(unique_name, "a", "resumed", 2, 11, 1000.5, {"synced_step": 10}, "inc1")
    coordinator.feed(unique_name, Reported(1000.5, resumed))

    [coordinators] = coordinator.info(unique_name)["recoveries"]
    assert list(coordinators) == RECOVERY_KEYS
    assert coordinators == {
        "cause": "c: worker lost",
        "detected_at": 1000.125,
        "resumed_at": 1000.5,
        "rto_s": 0.375,
        "steps_lost": 2,
        "workers_before": 3,
        "workers_after": 2,
        "how": "survive",
        "generation": 2,
        "step": 11,
        "verified": True,
    }
    events = history(run_topic(unique_name))
    assert RecoveryCompleted.kind in [e.kind for e in events]
    [folded] = _fold(events).recoveries
    assert folded == coordinator.runs[unique_name].view.recoveries[0]
    dashboard = DashboardState(run=unique_name)
    for event in events:
        dashboard.apply(event)
    assert dashboard.recoveries == [coordinators]
    [panel] = ResilienceManager().runs()
    [model] = panel.recoveries
    assert model == RecoveryModel.of(folded)
    as_shown = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)}
    assert as_shown.pop("time") == coordinators["resumed_at"]
    assert as_shown == {k: v for k, v in coordinators.items() if k != "resumed_at"}


def test_the_fold_imports_neither_torch_nor_dask() -> None:
    code = (
        "import sys, ft_notebook.runfold\n"
        "print(sorted(m for m in ('torch', 'dask', 'distributed') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _events(topic: str, *payloads: object) -> list[Event]:
    """``payloads`` as the events of one journal, numbered from 1, a second apart."""
    return [
        Event(topic, p.kind, seq=i, time=1000.0 + i, data=dataclasses.asdict(p))  # type: ignore[attr-defined,call-overload]
        for i, p in enumerate(payloads, 1)
    ]


def test_a_run_that_started_is_healthy_before_any_change_of_health() -> None:
    """Issue 33: a healthy running run showed a grey UNKNOWN badge, because health was
    told only when it changed. A run begins HEALTHY, and its start says so."""
    view = _fold(
        _events(
            run_topic("r"),
            RunStarted(total_steps=256, cluster="default", scheduler="tls://127.0.0.1:5"),
            RunStateChanged(RunState.RUNNING, RunState.PENDING, "3 workers"),
        )
    )
    assert (view.state, view.health, view.total_steps) == (RunState.RUNNING, Health.HEALTHY, 256)
    assert (view.cluster, view.scheduler) == ("default", "tls://127.0.0.1:5")


def test_a_resumed_run_starts_afresh_whatever_the_journal_said_of_the_old_one() -> None:
    """Issue 33: a resumed run that ended COMPLETED and HEALTHY showed COMPLETED ·
    DEGRADED in the panel, the old run's health (the new one never changed its own)."""
    topic = run_topic("r")
    old = _events(
        topic,
        RunStarted(total_steps=100),
        RunStateChanged(RunState.RUNNING, RunState.PENDING),
        HealthChanged(Health.DEGRADED, Health.HEALTHY, "2 of 3 workers"),
        RecoveryCompleted("cpu2: worker lost", 0.06, 0, 3, 2),
        RunStateChanged(RunState.FAILED, RunState.RUNNING, "cluster lost"),
    )
    resumed = _events(
        topic,
        RunStarted(total_steps=100),
        RunStateChanged(RunState.RUNNING, RunState.PENDING),
        RunProgress(step=100, total_steps=100, epoch=3, world_size=3, state="COMPLETED"),
        RunStateChanged(RunState.COMPLETED, RunState.RUNNING, "100 steps"),
    )
    resumed = [dataclasses.replace(e, seq=e.seq + len(old)) for e in resumed]
    view = _fold(old + resumed)
    assert (view.state, view.health, view.step) == (RunState.COMPLETED, Health.HEALTHY, 100)
    assert view.recoveries == ()  # the old run's, as Run.info() of the new one says


def test_the_step_is_never_behind_the_checkpoint_it_committed() -> None:
    """Issue 33: the panel showed ``step 59/256`` beside ``ckpt (step 80)``: progress
    is published about once a second, a checkpoint as it commits. A roll-back then
    takes the step back to where the run went."""
    topic = run_topic("r")
    view = _fold(
        _events(
            topic,
            RunStarted(total_steps=256),
            RunProgress(step=59, total_steps=256, epoch=0, world_size=3),
            CheckpointCommitted(checkpoint_step=80, nbytes=1),
        )
    )
    assert (view.step, view.checkpoint_step) == (80, 80)
    later = _events(topic, RolledBack(from_step=90, to_step=80))
    view = view.apply(dataclasses.replace(later[0], seq=4))
    assert view.step == 80
    view = view.apply(dataclasses.replace(_events(topic, RolledBack(95, 60))[0], seq=5))
    assert (view.step, view.checkpoint_step) == (60, 80)


def test_a_progress_event_that_crosses_a_checkpoint_does_not_take_the_step_back() -> None:
    """Rank 0's store commits step 80 while the coordinator publishes the progress it
    had (step 79): the journal says the checkpoint first. The step stays 80 until a
    progress event says more, or a roll-back takes it back."""
    later = _events(
        run_topic("r"),
        RunStarted(total_steps=256),
        CheckpointCommitted(checkpoint_step=80, nbytes=1),
        RunProgress(step=79, total_steps=256, epoch=0, world_size=3),
        RunProgress(step=83, total_steps=256, epoch=0, world_size=3),
        RolledBack(from_step=83, to_step=40),
        RunProgress(step=41, total_steps=256, epoch=0, world_size=3),
    )
    steps = [v.step for v in itertools.accumulate(later, RunView.apply, initial=RunView())]
    assert steps[2:] == [80, 80, 83, 40, 41]
