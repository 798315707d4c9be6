"""The dashboard as ipywidgets, with a bokeh chart (:mod:`._charts`).

:meth:`DashboardView.render` copies a :class:`DashboardState` into the widgets and
sends only what changed (a trait set to its own value sends nothing; new chart
points are streamed, not resent). It may run on any thread: ipykernel sends widget
messages from background threads. Text that may be long (the progress line, the
badge's reason) wraps in the width there is instead of being cut off.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets  # type: ignore[import-untyped]

from ft_notebook.widgets._charts import LossChart
from ft_notebook.widgets._render import (
    badge_html,
    checkpoints_html,
    recoveries_html,
    suspects_html,
    tile_html,
)
from ft_notebook.widgets._state import DashboardState, escape

#: A row whose items go to the next line when the width runs out.
_ROW = {"flex_flow": "row wrap", "align_items": "center", "width": "100%"}
#: Text that takes the width left in its row, and wraps in it.
_WRAPPING = {"flex": "1 1 240px", "min_width": "0"}


def wrapping(html: str) -> str:
    """``html`` in a block that wraps its lines (an ipywidgets HTML keeps a line's
    height, so a long text is otherwise cut off at the widget's edge)."""
    return (
        '<div class="ft-wrap" style="white-space:normal;overflow-wrap:anywhere;'
        f'line-height:1.4">{html}</div>'
    )


class DashboardView(widgets.VBox):  # type: ignore[misc]
    """Badge, progress, worker tiles, loss chart, checkpoints, suspect gradients,
    recoveries, snapshots."""

    def __init__(self, title: str, with_run: bool) -> None:
        self.title = widgets.HTML(f"<b>{escape(title)}</b>", layout={"flex": "0 0 auto"})
        self.badge = widgets.HTML(layout=_WRAPPING)
        self.progress = widgets.IntProgress(value=0, min=0, max=1, layout={"width": "320px"})
        self.progress_label = widgets.HTML(layout=_WRAPPING)
        self.tiles = widgets.HBox(layout={"flex_flow": "row wrap"})
        self.tile_views: dict[str, widgets.HTML] = {}
        self.checkpoints = widgets.HTML()
        self.recoveries = widgets.HTML()
        self.suspects = widgets.HTML()
        self.snapshot = widgets.HTML()
        children = [widgets.HBox([self.title, self.badge], layout=_ROW), self.tiles]
        self._chart: Any = None
        if with_run:
            self._chart = LossChart()
            children[1:1] = [widgets.HBox([self.progress, self.progress_label], layout=_ROW)]
            children += [self._chart.widget, self.checkpoints, self.suspects, self.recoveries]
        children.append(self.snapshot)
        super().__init__(children)
        self._rendered_version = -1

    def render(self, s: DashboardState) -> None:
        if s.version == self._rendered_version:
            return
        self._rendered_version = s.version
        self.badge.value = wrapping(badge_html(s))
        if self._chart is not None:
            self.progress.max = max(1, s.total_steps or s.step)
            self.progress.value = min(s.step, self.progress.max)
            self.progress_label.value = wrapping(
                f'<span class="ft-progress">{escape(s.progress_line())}</span>'
            )
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
