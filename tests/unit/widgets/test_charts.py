"""The dashboards' charts and views say what they show: labelled axes with units, a log
loss axis, a legend entry per line and per kind of mark drawn, replica chips that read
as replicas, labelled breakers, and progress text that wraps."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from bokeh.models import LinearAxis, LogAxis, LogScale

from ft_notebook.events import (
    Event,
    Health,
    HealthChanged,
    RecoveryCompleted,
    ReplicaLost,
    ReplicaReady,
    RunProgress,
    ServiceStarted,
    WorkerLost,
    history,
    publish,
    run_topic,
    service_topic,
)
from ft_notebook.widgets import DashboardState, ServiceDashboard, ServiceState
from ft_notebook.widgets._charts import SERVICE_SERIES, LossChart, ServiceChart
from ft_notebook.widgets._view import DashboardView

pytestmark = pytest.mark.unit


def _labels(fig: object, visible_only: bool = True) -> list[str]:
    legend = fig.legend[0]  # type: ignore[attr-defined]
    return [i.label["value"] for i in legend.items if i.visible or not visible_only]


def _a_run(run: str, losses: tuple[float, ...] = (2.0, 0.3, 0.02)) -> DashboardState:
    topic = run_topic(run)
    workers = ({"name": "a", "state": "training"}, {"name": "b", "state": "training"})
    for step, loss in enumerate(losses, 1):
        publish(RunProgress(step, 40, 0, 2, loss=loss, workers=workers), topic, step=step)
    publish(WorkerLost("b", "tcp://b", "process gone or connection closed"), topic, step=3)
    publish(RecoveryCompleted("b: process gone", 0.2, 0, 2, 1), topic, step=3)
    state = DashboardState(run=run)
    for event in history(topic):
        state.apply(event)
    return state


def test_the_loss_chart_has_a_log_loss_axis_and_a_legend_of_the_marks_drawn(
    isolated_data_dir: Path, unique_name: str
) -> None:
    chart = LossChart()
    fig = chart.figure
    assert [a.axis_label for a in fig.xaxis] == ["step"]
    assert [a.axis_label for a in fig.yaxis] == ["loss (log scale)"]
    assert isinstance(fig.yaxis[0], LogAxis)
    assert isinstance(fig.y_scale, LogScale)
    # every kind of mark has its entry, shown once such a mark is drawn
    assert _labels(fig) == ["loss"]
    assert "worker lost" in _labels(fig, visible_only=False)
    chart.update(_a_run(unique_name))
    assert _labels(fig) == ["loss", "worker lost", "recovered"]
    assert chart.loss.data["step"] == [1, 2, 3]
    assert chart.loss.data["loss"] == [2.0, 0.3, 0.02]
    assert chart.marks["worker lost"].data["label"] == ["b lost"]
    assert chart.marks["recovered"].data["step"] == [3]
    assert chart.widget.children[0]._model is chart.figure  # the figure shown


@pytest.mark.parametrize("losses", [(2.0, 0.0, 0.5), (-0.5, -0.9, -1.0)])
def test_a_loss_of_0_or_less_draws_the_chart_again_on_a_linear_axis(
    isolated_data_dir: Path, unique_name: str, losses: tuple[float, ...]
) -> None:
    """A log axis has no place for them (a negative log-likelihood, a loss that reached
    0): on it they were left out, and a run of negative losses drew no line at all."""
    chart = LossChart()
    first = chart.widget.children[0]
    chart.update(_a_run(unique_name, losses))
    fig = chart.figure
    assert chart.widget.children[0] is not first  # the figure was swapped
    assert [a.axis_label for a in fig.yaxis] == ["loss"]
    assert not isinstance(fig.y_scale, LogScale)
    assert chart.loss.data["loss"] == list(losses)  # every point, the earlier ones too
    assert _labels(fig) == ["loss", "worker lost", "recovered"]  # the marks drawn again


def test_the_service_chart_plots_rates_and_p99_over_seconds_with_a_legend() -> None:
    chart = ServiceChart(max_points=3)
    fig = chart.figure
    assert [a.axis_label for a in fig.xaxis] == ["time since the dashboard opened (s)"]
    left, right = fig.left[0], fig.right[0]
    assert (left.axis_label, right.axis_label) == ("requests/s", "p99 latency (ms)")
    assert isinstance(right, LinearAxis)
    assert right.y_range_name == "latency"
    assert _labels(fig) == list(SERVICE_SERIES)
    assert SERVICE_SERIES == (
        "requests/s",
        "answered by the fallback (req/s)",
        "p99 latency (ms)",
    )
    chart.update([(100.0, 200.0, 4.0, 12.0, 0.0), (101.0, 100.0, 5.0, None, 0.25)])
    chart.update([(101.0, 100.0, 5.0, None, 0.25), (102.5, 50.0, 4.0, 30.0, 1.0)])  # one new
    data = chart.source.data
    assert data["t"] == [0.0, 1.0, 2.5]  # seconds since the first point
    assert data["rps"] == [200.0, 100.0, 50.0]
    assert data["fallback"] == [0.0, 25.0, 50.0]  # answers/s, on the requests/s axis
    assert data["p99"][0] == 12.0
    assert math.isnan(data["p99"][1])  # no latency known: a gap, not a 0
    chart.update([(103.0, 1.0, 1.0, 1.0, 0.0)])
    assert data["t"] == [1.0, 2.5, 3.0]  # rolled over at max_points


def test_the_progress_text_and_the_badge_wrap_instead_of_being_cut(
    isolated_data_dir: Path, unique_name: str
) -> None:
    view = DashboardView(f"run {unique_name}", with_run=True)
    state = _a_run(unique_name)
    view.render(state)
    for html in (view.progress_label.value, view.badge.value):
        assert "white-space:normal" in html
    assert state.progress_line() in view.progress_label.value
    assert view.progress_label.layout.flex == "1 1 240px"
    assert view.progress_label.layout.min_width == "0"
    row = view.children[1]
    assert row.layout.flex_flow == "row wrap"


def _event(seq: int, payload: object, name: str = "m") -> Event:
    import dataclasses
    import enum

    data = {
        k: v.value if isinstance(v, enum.Enum) else v
        for k, v in dataclasses.asdict(payload).items()  # type: ignore[call-overload]
    }
    return Event(service_topic(name), payload.kind, seq=seq, time=float(seq), data=data)  # type: ignore[attr-defined]


def test_service_chips_read_as_replicas_with_a_labelled_breaker_and_the_detail_kept() -> None:
    raw = "CommClosedError: in <TLS (closed) ConnectionPool.ft_serve_predict>: Stream is closed"
    status = {
        "tier": "DEGRADED",
        "reason": "1 of 2 replicas in rotation: replica 1's worker was lost (connection closed)",
        "detail": raw,
        "replicas": [
            {"replica": "m/0", "breaker": "CLOSED", "inflight": 1, "served": 9, "errors": 0},
            {
                "replica": "m/1",
                "breaker": "OPEN",
                "reason": "replica 1's worker was lost (connection closed)",
                "detail": raw,
                "inflight": 0,
                "served": 3,
                "errors": 1,
            },
        ],
        "requests": 12,
        "fallback": 0,
    }
    board = ServiceDashboard("m", lambda: status, period=60)
    try:
        for e in [
            _event(1, ServiceStarted(3)),
            _event(2, ReplicaReady("m/0", "0", "tcp://a", 0.5)),
            _event(3, ReplicaReady("m/1", "1", "tcp://b", 0.5)),
            _event(
                4,
                ReplicaLost(
                    "m/2",
                    "2",
                    "tcp://c",
                    "replica 2's worker 2 was lost (its process is gone or its connection closed)",
                    "worker 2 lost: process gone or connection closed",
                ),
            ),
            _event(5, HealthChanged(Health.DEGRADED, Health.HEALTHY, "2 of 3 ready")),
        ]:
            board._on_event(e)
        board.poll()
        tiles = board.view.tiles.value
        assert tiles.count('class="ft-chip"') == 3
        for chip in ("replica 0: ready", "replica 1: ready", "replica 2: lost"):
            assert f'class="ft-chip">{chip}</b>' in tiles
        assert ">breaker closed</span>" in tiles
        assert ">breaker open</span>" in tiles
        # why each is out, in words, with the raw text as the tooltip and a details line
        assert 'title="worker 2 lost: process gone or connection closed">replica 2' in tiles
        assert "replica 1&#x27;s worker was lost (connection closed)" in tiles
        header = board.view.header.value
        shown = re.search(r'class="ft-reason"[^>]*>([^<]*)</span>', header)
        assert shown is not None
        assert shown[1] == (
            "1 of 2 replicas in rotation: replica 1&#x27;s worker was lost (connection closed)"
        )
        assert f'title="{raw.replace("<", "&lt;").replace(">", "&gt;")}"' in header
        assert "<summary>details</summary>" in header
        assert "2 of 3 replicas ready" in header
        text = repr(board)
        assert "replica 2: lost (replica 2's worker 2 was lost" in text
        assert "breaker open" in text
        assert "breaker CLOSED" not in text
    finally:
        board.close()


def test_a_service_state_without_widgets_shows_the_static_chart_with_its_time_scale() -> None:
    state = ServiceState("m")
    state.apply({"tier": "HEALTHY", "requests": 0, "fallback": 0}, now=0.0)
    state.apply({"tier": "HEALTHY", "requests": 50, "fallback": 0, "p99_s": 0.01}, now=5.0)
    state.apply({"tier": "HEALTHY", "requests": 150, "fallback": 10, "p99_s": 0.02}, now=15.0)
    html = state.html()
    assert "<svg" in html
    assert ">0 s</text>" in html
    assert ">10 s (time since the first point)</text>" in html
    assert "max 10 req/s" in html
    assert "each line scaled to its own maximum" in html
