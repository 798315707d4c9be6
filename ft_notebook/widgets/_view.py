"""The dashboard as ipywidgets, with a bokeh chart through jupyter_bokeh.

:meth:`DashboardView.render` copies a :class:`DashboardState` into the widgets and
sends only what changed (a trait set to its own value sends nothing; new chart
points are streamed, not resent). It may run on any thread: ipykernel sends widget
messages from background threads. BokehJS comes inline with jupyter_bokeh's front
end, never from a CDN.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets  # type: ignore[import-untyped]

from ft_notebook.widgets._render import (
    badge_html,
    checkpoints_html,
    recoveries_html,
    suspects_html,
    tile_html,
)
from ft_notebook.widgets._state import DashboardState, escape

_MARKER_COLOURS = {
    "worker-lost": "#c62828",
    "worker-hung": "#ef6c00",
    "recovery-completed": "#2e7d32",
    "step-skipped": "#6a1b9a",
    "rolled-back": "#6a1b9a",
    "state-repaired": "#ad1457",
}


class DashboardView(widgets.VBox):  # type: ignore[misc]
    """Badge, progress, worker tiles, loss chart, checkpoints, suspect gradients,
    recoveries, snapshots."""

    def __init__(self, title: str, with_run: bool) -> None:
        self.title = widgets.HTML(f"<b>{escape(title)}</b>")
        self.badge = widgets.HTML()
        self.progress = widgets.IntProgress(value=0, min=0, max=1, layout={"width": "320px"})
        self.progress_label = widgets.HTML()
        self.tiles = widgets.HBox(layout={"flex_flow": "row wrap"})
        self.tile_views: dict[str, widgets.HTML] = {}
        self.checkpoints = widgets.HTML()
        self.recoveries = widgets.HTML()
        self.suspects = widgets.HTML()
        self.snapshot = widgets.HTML()
        children = [widgets.HBox([self.title, self.badge]), self.tiles]
        self._chart: Any = None
        if with_run:
            self._chart = LossChart()
            children[1:1] = [widgets.HBox([self.progress, self.progress_label])]
            children += [self._chart.widget, self.checkpoints, self.suspects, self.recoveries]
        children.append(self.snapshot)
        super().__init__(children)
        self._rendered_version = -1

    def render(self, s: DashboardState) -> None:
        if s.version == self._rendered_version:
            return
        self._rendered_version = s.version
        self.badge.value = badge_html(s)
        if self._chart is not None:
            self.progress.max = max(1, s.total_steps or s.step)
            self.progress.value = min(s.step, self.progress.max)
            self.progress_label.value = escape(s.progress_line())
            self._chart.update(s)
            self.checkpoints.value = checkpoints_html(s)
            self.suspects.value = suspects_html(s)
            self.recoveries.value = recoveries_html(s)
        for name, tile in s.tiles.items():
            view = self.tile_views.get(name)
            if view is None:
                view = self.tile_views[name] = widgets.HTML()
                self.tiles.children = (*self.tiles.children, view)
            view.value = tile_html(tile)
        self.snapshot.value = escape(s.snapshot_line())


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


class LossChart:
    """Loss over steps, with a vertical mark at every failure and recovery."""

    def __init__(self) -> None:
        load_bokehjs()
        from bokeh.models import ColumnDataSource
        from bokeh.plotting import figure
        from jupyter_bokeh import BokehModel  # type: ignore[import-untyped]

        self.loss = ColumnDataSource({"step": [], "loss": []})
        self.marks = ColumnDataSource({"step": [], "colour": [], "label": []})
        fig = figure(
            height=220,
            width=640,
            x_axis_label="step",
            y_axis_label="loss",
            toolbar_location=None,
            tools="hover",
            tooltips=[("step", "@step"), ("", "@label")],
        )
        fig.line("step", "loss", source=self.loss, line_width=2)
        fig.segment(
            x0="step",
            x1="step",
            y0=0,
            y1=1,
            source=self.marks,
            color="colour",
            line_dash="dashed",
            line_width=2,
            y_range_name="marks",
        )
        from bokeh.models import Range1d

        fig.extra_y_ranges = {"marks": Range1d(start=0, end=1)}
        self.widget = BokehModel(fig)
        self._points = 0
        self._marks = 0

    def update(self, s: DashboardState) -> None:
        new = s.loss[self._points :]
        if new:
            self.loss.stream({"step": [p[0] for p in new], "loss": [p[1] for p in new]})
            self._points = len(s.loss)
        marks = s.markers[self._marks :]
        if marks:
            self.marks.stream(
                {
                    "step": [m["step"] for m in marks],
                    "colour": [_MARKER_COLOURS.get(m["kind"], "#455a64") for m in marks],
                    "label": [m["label"] for m in marks],
                }
            )
            self._marks = len(s.markers)
