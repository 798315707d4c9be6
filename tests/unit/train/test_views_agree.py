"""Issue 33: ``run.info()``, the fold of the run's journal (what dashboards and
``run.wait()`` read), the REST payload the JupyterLab panel reads, and the status
bar's text (its own TypeScript, run by Node on that payload) agree on what a run is,
at every point of any sequence of reports and faults.

The coordinator is the real one, driven as the scheduler drives it
(:mod:`ft_notebook.testing.coordinator_drive`); its events go to a real journal in a
private data folder.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ft_notebook.events import Health, RunState, history, run_topic
from ft_notebook.runfold import RunView
from ft_notebook.server._manager import ResilienceManager
from ft_notebook.testing import status_bar
from ft_notebook.testing.coordinator_drive import OPS, Drive

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(bool(status_bar.available()), reason=status_bar.available()),
]


def _agree(drive: Drive, shown: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """What ``run.info()``, the journal's fold and the panel's REST payload say; the
    payload and ``run.info()`` go to ``shown`` for the status bar."""
    info = drive.coordinator.info(drive.name)
    view = functools.reduce(RunView.apply, history(run_topic(drive.name)), RunView())
    [panel] = [r for r in ResilienceManager().runs() if r.name == drive.name]
    said = (
        RunState(info["state"]),
        Health(info["health"]),
        info["step"],
        info["world_size"],
        info["checkpoint"],
        len(info["recoveries"]),
    )
    for seen in (view, panel):
        assert (
            seen.state,
            seen.health,
            seen.step or 0,
            seen.world_size or 0,
            seen.checkpoint_step,
            len(seen.recoveries),
        ) == said
    # what the status bar takes: an active run's checkpoint age and badge
    assert not panel.cluster_gone  # no registered cluster here to be gone
    assert (panel.state not in _FINISHED) == (not RunState(info["state"]).finished)
    shown.append((info, panel.to_json()))


def _status_bar_agrees(shown: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """The status bar's code on each payload says what ``run.info()`` said: no run
    active once it ended; degraded unless running and healthy; the checkpoint's age
    exactly when the run has a checkpoint."""
    bars = status_bar.summaries([[json.loads(json.dumps(payload))] for _, payload in shown])
    for (info, _), bar in zip(shown, bars, strict=True):
        state, health = RunState(info["state"]), Health(info["health"])
        if state not in _ACTIVE:
            assert (bar["kind"], bar["text"]) == ("none", "FT –"), (info["state"], bar)
            continue
        healthy = state is RunState.RUNNING and health is Health.HEALTHY
        assert bar["kind"] == ("ok" if healthy else "degraded"), (state, health, bar)
        assert ("ckpt" in bar["text"]) == (info["checkpoint"] is not None), (info, bar)


def _as_told(drive: Drive, op: str) -> None:
    """What the coordinator was just told shows, not only the same thing everywhere."""
    info = drive.coordinator.info(drive.name)
    if RunState(info["state"]).finished or info["members"] == []:
        return
    if op == "progress":  # published: its step, whatever was not published before
        assert info["step"] == drive.step
    if op == "checkpoint":  # committed at the run's step: shown, and the step with it
        assert (info["checkpoint"], info["step"]) == (drive.step, drive.step)


_FINISHED = {RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED}
_ACTIVE = {RunState.RUNNING, RunState.RECOVERING, RunState.STALLED}


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(st.sampled_from(OPS), max_size=30))
def test_every_view_says_what_the_run_is_after_any_sequence(
    isolated_data_dir: Path, ops: list[str]
) -> None:
    shown: list[tuple[dict[str, Any], dict[str, Any]]] = []

    async def scenario() -> None:
        drive = await Drive.started(f"t-{uuid.uuid4().hex[:10]}")
        _agree(drive, shown)
        for op in ops:
            await drive.do(op)
            _agree(drive, shown)
            _as_told(drive, op)

    asyncio.run(scenario())
    _status_bar_agrees(shown)
