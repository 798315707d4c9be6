"""What ``run.wait()`` follows: the events of its own run only, and a coordinator
that is not there said so (issue 33's review)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ft_notebook.events import (
    RunProgress,
    RunStarted,
    RunState,
    RunStateChanged,
    publish,
    run_topic,
)
from ft_notebook.train.kernel._calls import NoCoordinator, ask
from ft_notebook.train.kernel._follow import RunFollower
from ft_notebook.train.kernel._handle import runs
from ft_notebook.train.protocol import RunAction

pytestmark = pytest.mark.unit


def _a_run(name: str, incarnation: str, steps: int, end: RunState | None) -> None:
    topic = run_topic(name)
    publish(RunStarted(total_steps=100, incarnation=incarnation), topic)
    publish(RunStateChanged(RunState.RUNNING, RunState.PENDING), topic)
    publish(RunProgress(step=steps, total_steps=100, epoch=0, world_size=2), topic)
    if end is not None:
        publish(RunStateChanged(end, RunState.RUNNING), topic)
        publish(RunProgress(step=steps, total_steps=100, epoch=0, world_size=2, state=end), topic)


def test_a_run_is_not_taken_for_an_earlier_run_of_its_name(isolated_data_dir: Path) -> None:
    """The journal holds an earlier run of the name that ended: a wait for the new run
    took it for its own and returned at once, with the old run's numbers."""
    _a_run("mnist", "old", steps=100, end=RunState.COMPLETED)
    follower = RunFollower("mnist", None, "new")
    try:
        assert not follower.ended
        assert follower.view.state is None  # nothing of the new run yet
        _a_run("mnist", "new", steps=7, end=None)
        assert (follower.view.state, follower.view.step) == (RunState.RUNNING, 7)
        assert not follower.ended
        publish(RunStateChanged(RunState.COMPLETED, RunState.RUNNING), run_topic("mnist"))
        publish(
            RunProgress(step=100, total_steps=100, epoch=3, world_size=2, state="COMPLETED"),
            run_topic("mnist"),
        )
        assert follower.ended
        assert follower.view.step == 100
    finally:
        follower.close()


def test_a_run_that_ended_before_the_wait_ends_it_at_once(isolated_data_dir: Path) -> None:
    _a_run("cifar", "only", steps=40, end=RunState.FAILED)
    follower = RunFollower("cifar", None, "only")
    try:
        assert follower.ended
        assert (follower.view.state, follower.view.step) == (RunState.FAILED, 40)
    finally:
        follower.close()


class _SchedulerWithoutTheHandler:
    """Enough of a Client whose scheduler never had ``fit`` run on it: Dask answers a
    call to a handler it does not have with None (and logs a KeyError)."""

    @property
    def scheduler(self) -> Any:
        return self

    def ft_train(self, **kwargs: Any) -> None:
        return None

    def sync(self, handler: Any, **kwargs: Any) -> Any:
        return handler(**kwargs)


def test_a_cluster_without_a_coordinator_has_no_runs_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ft.runs()`` there raised a TypeError (None is not iterable), ``ft.attach`` one
    from ``dict(None)``."""
    from ft_notebook.train.kernel import _handle

    client = _SchedulerWithoutTheHandler()
    with pytest.raises(NoCoordinator, match=r"no 'ft_train' handler: ft\.fit never ran"):
        ask(client, RunAction.INFO, name="mnist")
    monkeypatch.setattr(_handle, "client_for", lambda cluster: client)
    assert runs("any") == []
    with pytest.raises(NoCoordinator):
        _handle.attach("mnist", "any")
