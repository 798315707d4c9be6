"""The dashboards' bokeh charts, through jupyter_bokeh: a run's loss over steps and a
service's rates and latency over time.

Every chart says what it plots: both axes are labelled with their units, and every
line and kind of mark has a legend entry (a mark kind's entry shows once such a mark
is drawn, so a run with no failure has no legend of failures). New points are
streamed, never resent. BokehJS comes inline with jupyter_bokeh's front end, never
from a CDN (the machine may be offline).
"""

from __future__ import annotations

import math
from typing import Any

from ft_notebook.widgets._state import DashboardState

#: Mark kind -> (legend label, colour, dash) of its vertical line on the loss chart.
MARK_KINDS: dict[str, tuple[str, str, str]] = {
    "worker-lost": ("worker lost", "#c62828", "dashed"),
    "worker-hung": ("worker hung", "#ef6c00", "dashed"),
    "recovery-completed": ("recovered", "#2e7d32", "solid"),
    "step-skipped": ("step skipped (not finite)", "#6a1b9a", "dotted"),
    "rolled-back": ("rolled back", "#4527a0", "dashdot"),
    "state-repaired": ("state repaired", "#ad1457", "dotted"),
}
#: Its legend label for a mark of a kind not in MARK_KINDS (drawn grey).
OTHER_MARK = ("other event", "#455a64", "dashed")

_bokeh_loaded = False


def load_bokehjs() -> None:
    """Put BokehJS into the notebook page once per kernel, inline (no CDN: the
    machine may be offline); jupyter_bokeh's widgets render with it."""
    global _bokeh_loaded
    if _bokeh_loaded:
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if get_ipython() is None:  # not in a kernel: nothing to load into
        return
    from bokeh.io import output_notebook
    from bokeh.resources import INLINE

    output_notebook(resources=INLINE, hide_banner=True)
    _bokeh_loaded = True


def _widget(fig: Any) -> Any:
    from jupyter_bokeh import BokehModel  # type: ignore[import-untyped]

    return BokehModel(fig)


class LossChart:
    """Loss over steps on a log axis (a linear one flattens everything after the first
    steps), with a vertical line at every failure, recovery and repair. A loss of 0 or
    less has no place on a log axis (a loss that may be negative, such as a negative
    log-likelihood): at the first such point the chart is drawn again on a linear axis,
    with every point so far."""

    def __init__(self) -> None:
        load_bokehjs()
        import ipywidgets  # type: ignore[import-untyped]

        self.widget = ipywidgets.Box()  # holds the figure; a change of axis swaps it
        self.log = True
        self._build()

    def _build(self) -> None:
        from bokeh.models import ColumnDataSource, HoverTool, LinearScale, Range1d
        from bokeh.models.annotations import Legend
        from bokeh.plotting import figure

        self.loss = ColumnDataSource({"step": [], "loss": []})
        fig = figure(
            height=240,
            width=680,
            x_axis_label="step",
            y_axis_label="loss (log scale)" if self.log else "loss",
            y_axis_type="log" if self.log else "linear",
            toolbar_location=None,
            tools="",
        )
        fig.extra_y_ranges = {"marks": Range1d(start=0, end=1)}
        fig.extra_y_scales = {"marks": LinearScale()}  # marks span the plot's height
        line = fig.line("step", "loss", source=self.loss, line_width=2, color="#1565c0")
        fig.add_tools(HoverTool(renderers=[line], tooltips=[("step", "@step"), ("loss", "@loss")]))
        items = [_item("loss", line, visible=True)]
        self.marks: dict[str, Any] = {}  # legend label -> its source
        self._items: dict[str, Any] = {}  # legend label -> its legend item
        marks: list[Any] = []
        for label, colour, dash in (*MARK_KINDS.values(), OTHER_MARK):
            source = ColumnDataSource({"step": [], "label": []})
            segment = fig.segment(
                x0="step",
                x1="step",
                y0=0,
                y1=1,
                source=source,
                color=colour,
                line_dash=dash,
                line_width=2,
                y_range_name="marks",
            )
            marks.append(segment)
            items.append(_item(label, segment, visible=False))
            self.marks[label], self._items[label] = source, items[-1]
        fig.add_tools(HoverTool(renderers=marks, tooltips=[("step", "@step"), ("", "@label")]))
        fig.add_layout(Legend(items=items, click_policy="hide"), "right")
        self.figure = fig
        self.widget.children = (_widget(fig),)
        self._points = 0
        self._marks = 0

    def update(self, s: DashboardState) -> None:
        new = s.loss[self._points :]
        if self.log and any(p[1] <= 0 for p in new):
            self.log = False
            self._build()  # points and marks so far are streamed again, below
            new = s.loss
        shown = [p for p in new if math.isfinite(p[1])]
        if shown:
            self.loss.stream({"step": [p[0] for p in shown], "loss": [p[1] for p in shown]})
        self._points = len(s.loss)
        for m in s.markers[self._marks :]:
            label = MARK_KINDS.get(m["kind"], OTHER_MARK)[0]
            self.marks[label].stream({"step": [m["step"]], "label": [m["label"]]})
            self._items[label].visible = True
        self._marks = len(s.markers)


def _item(label: str, renderer: Any, *, visible: bool) -> Any:
    from bokeh.models.annotations import LegendItem

    return LegendItem(label=label, renderers=[renderer], visible=visible)


#: Legend labels of the service chart's lines.
SERVICE_SERIES = ("requests/s", "answered by the fallback (req/s)", "p99 latency (ms)")


class ServiceChart:
    """A service's requests/s and fallback answers/s (left axis) and p99 latency in ms
    (right axis) over the seconds since the dashboard opened."""

    def __init__(self, max_points: int) -> None:
        load_bokehjs()
        from bokeh.models import ColumnDataSource, DataRange1d, HoverTool, LinearAxis
        from bokeh.models.annotations import Legend
        from bokeh.plotting import figure

        self.source = ColumnDataSource({"t": [], "rps": [], "fallback": [], "p99": []})
        fig = figure(
            height=220,
            width=680,
            x_axis_label="time since the dashboard opened (s)",
            y_axis_label="requests/s",
            toolbar_location=None,
            tools="",
        )
        latency = DataRange1d(start=0)
        fig.extra_y_ranges = {"latency": latency}
        fig.add_layout(LinearAxis(y_range_name="latency", axis_label="p99 latency (ms)"), "right")
        rps = fig.line("t", "rps", source=self.source, line_width=2, color="#1565c0")
        fallback = fig.line("t", "fallback", source=self.source, line_width=2, color="#c62828")
        p99 = fig.line(
            "t",
            "p99",
            source=self.source,
            line_width=2,
            color="#6a1b9a",
            line_dash="dashed",
            y_range_name="latency",
        )
        fig.y_range = DataRange1d(start=0, renderers=[rps, fallback])
        latency.renderers = [p99]
        fig.add_tools(
            HoverTool(
                renderers=[rps],
                mode="vline",
                tooltips=[
                    ("time", "@t{0.0} s"),
                    ("requests/s", "@rps{0.0}"),
                    ("by the fallback", "@fallback{0.0}/s"),
                    ("p99", "@p99{0.0} ms"),
                ],
            )
        )
        items = [
            _item(label, renderer, visible=True)
            for label, renderer in zip(SERVICE_SERIES, (rps, fallback, p99), strict=True)
        ]
        fig.add_layout(Legend(items=items, location="top_left", click_policy="hide"), "below")
        self.figure = fig
        self.widget = _widget(fig)
        self._max = max_points
        self._t0: float | None = None
        self._last = -math.inf

    def update(self, series: list[tuple[float, float, float | None, float | None, float]]) -> None:
        """Stream the points of ``series`` (time, requests/s, p50 ms, p99 ms, fallback
        share) newer than those already shown."""
        new = [p for p in series if p[0] > self._last]
        if not new:
            return
        if self._t0 is None:
            self._t0 = new[0][0]
        t0 = self._t0
        self.source.stream(
            {
                "t": [p[0] - t0 for p in new],
                "rps": [p[1] for p in new],
                "fallback": [p[1] * p[4] for p in new],
                "p99": [math.nan if p[3] is None else p[3] for p in new],
            },
            rollover=self._max,
        )
        self._last = new[-1][0]
