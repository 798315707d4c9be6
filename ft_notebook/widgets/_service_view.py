"""A service dashboard as ipywidgets: the tier and its reason, a chip per replica, a
bokeh chart of requests/s, fallback answers/s and p99 latency over time (labelled
axes, a legend), and this caller's counts.

:meth:`ServiceDashboardView.render` sets only what changed (a trait set to its own
value sends nothing) and streams the chart's new points; it may run on any thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ipywidgets as widgets  # type: ignore[import-untyped]

from ft_notebook.widgets._charts import ServiceChart
from ft_notebook.widgets._service_html import counts_html, header_html, tiles_html

if TYPE_CHECKING:
    from ft_notebook.widgets._service import ServiceState


class ServiceDashboardView(widgets.VBox):  # type: ignore[misc]
    def __init__(self, max_points: int) -> None:
        self.header = widgets.HTML(layout={"width": "100%"})
        self.tiles = widgets.HTML(layout={"width": "100%"})
        self.chart = ServiceChart(max_points)
        self.counts = widgets.HTML()
        super().__init__([self.header, self.tiles, self.chart.widget, self.counts])

    def render(self, s: ServiceState) -> None:
        self.header.value = header_html(s)
        self.tiles.value = tiles_html(s)
        self.chart.update(s.series)
        self.counts.value = counts_html(s)
