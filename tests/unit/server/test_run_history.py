"""Runs' and services' histories: the fold's bounded points, the manager's answers and
the authenticated routes that serve them to the lab's dashboards."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

from ft_notebook.events import (
    Event,
    Health,
    HealthChanged,
    RecoveryCompleted,
    RunProgress,
    RunStarted,
    RunState,
    RunStateChanged,
    publish,
    run_topic,
)
from ft_notebook.runfold import MAX_POINTS, RunView
from ft_notebook.server import API_PREFIX
from ft_notebook.server._manager import BadRequest, NotFound, ResilienceManager

pytest_plugins = ["pytest_jupyter.jupyter_server"]

Fetch = Callable[..., Awaitable[HTTPResponse]]


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"ft_notebook.server": True}}}


BAD_NAMES = ["../etc", "a/b", "", ".hidden", "x" * 200, "a..b"]


def _progress(step: int, loss: float | None = 1.0, sps: float | None = 50.0) -> RunProgress:
    return RunProgress(
        step=step, total_steps=10_000, epoch=0, world_size=2, loss=loss, samples_per_s=sps
    )


def _event(seq: int, payload: Any, at: float) -> Event:
    return Event(run_topic("r"), payload.kind, seq=seq, time=at, data=dataclasses.asdict(payload))


def test_the_fold_keeps_every_report_until_full_then_halves_keeping_first_and_newest() -> None:
    view = RunView()
    for i in range(MAX_POINTS):
        view = view.apply(_event(i + 1, _progress(i, loss=1.0 / (i + 1)), 1000.0 + i))
    assert [p.step for p in view.history] == list(range(MAX_POINTS))
    assert view.history[3].loss == pytest.approx(0.25)
    assert view.history[3].time == 1003.0
    view = view.apply(_event(MAX_POINTS + 1, _progress(MAX_POINTS), 2000.0))
    steps = [p.step for p in view.history]
    assert len(steps) == MAX_POINTS // 2 + 1
    assert steps[0] == 0
    assert steps[-1] == MAX_POINTS
    assert steps == list(range(0, MAX_POINTS + 1, 2))
    # reports for a day stay bounded
    for i in range(MAX_POINTS + 1, 3 * MAX_POINTS):
        view = view.apply(_event(i + 1, _progress(i), 2000.0 + i))
    assert MAX_POINTS // 2 < len(view.history) <= MAX_POINTS
    assert view.history[0].step == 0
    assert view.history[-1].step == 3 * MAX_POINTS - 1
    # a replayed event adds nothing; a new run under the name starts a new history
    assert view.apply(_event(5, _progress(4), 1004.0)) is view
    fresh = view.apply(_event(10_000, RunStarted(total_steps=5), 9000.0))
    assert fresh.history == ()


def test_run_history_agrees_with_the_runs_row_and_says_why(isolated_data_dir: Path) -> None:
    topic = run_topic("hist")
    publish(RunStateChanged(RunState.RUNNING, RunState.PENDING), topic)
    publish(_progress(10, loss=0.5, sps=120.0), topic)
    publish(RecoveryCompleted("cpu1: worker lost", 0.06, 2, 3, 2), topic)
    publish(HealthChanged(Health.DEGRADED, Health.HEALTHY, "2 of 3 workers"), topic)
    publish(_progress(12, loss=None, sps=None), topic)
    manager = ResilienceManager()
    history = manager.run_history("hist")
    [row] = manager.runs()
    assert history.run == row
    assert history.reason == "2 of 3 workers"
    assert [(p.step, p.loss, p.samples_per_s) for p in history.points] == [
        (10, 0.5, 120.0),
        (12, None, None),  # not told: null, not a default
    ]
    assert history.points[0].time <= history.points[1].time <= time.time()
    body = json.loads(json.dumps(history.to_json(), allow_nan=False))
    assert body["run"]["recoveries"][0]["cause"] == "cpu1: worker lost"
    assert body["points"][1] == {
        "time": history.points[1].time,
        "step": 12,
        "loss": None,
        "samples_per_s": None,
    }


@pytest.mark.parametrize("name", BAD_NAMES)
def test_run_history_refuses_names_that_are_not_a_runs(isolated_data_dir: Path, name: str) -> None:
    (isolated_data_dir / "journal").mkdir(exist_ok=True)
    with pytest.raises(BadRequest, match="run name"):
        ResilienceManager().run_history(name)


def test_run_history_of_a_run_without_a_journal_is_404(isolated_data_dir: Path) -> None:
    publish(_progress(1), run_topic("there"))
    with pytest.raises(NotFound, match="'absent'"):
        ResilienceManager().run_history("absent")


@pytest.mark.parametrize("name", ["../etc", "a..b", ".hidden"])
def test_service_history_refuses_bad_names_before_asking_a_cluster(
    isolated_data_dir: Path, name: str
) -> None:
    with pytest.raises(BadRequest, match="service name"):
        ResilienceManager().service_history("default", name)
    with pytest.raises(BadRequest, match="cluster name"):
        ResilienceManager().service_history(name, "svc")


def test_service_history_of_a_cluster_not_running_is_404(isolated_data_dir: Path) -> None:
    with pytest.raises(NotFound, match="No cluster named 'nowhere'"):
        ResilienceManager().service_history("nowhere", "svc")


async def test_the_history_routes_are_authenticated_and_check_names(
    jp_fetch: Fetch, isolated_data_dir: Path
) -> None:
    publish(_progress(7, loss=0.3), run_topic("web"))
    body = json.loads((await jp_fetch(API_PREFIX, "runs", "web", "history")).body)
    assert body["run"]["name"] == "web"
    assert [(p["step"], p["loss"]) for p in body["points"]] == [(7, 0.3)]
    with pytest.raises(HTTPClientError) as anonymous:
        await jp_fetch(API_PREFIX, "runs", "web", "history", headers={"Authorization": ""})
    assert anonymous.value.code == 403
    for path, code, reason in [
        (("runs", "a..b", "history"), 400, "BadRequest"),
        (("runs", "absent", "history"), 404, "NotFound"),
        (("services", "svc", "history"), 404, "NotFound"),  # no cluster runs
        (("services", "a..b", "history"), 400, "BadRequest"),
    ]:
        answer = await jp_fetch(API_PREFIX, *path, raise_error=False)
        assert (answer.code, json.loads(answer.body)["reason"]) == (code, reason), path
