"""Feeding a dashboard from the event stream, in the background.

:class:`LiveDashboard` subscribes to the topics it shows (a subscription replays the
journal first, so a dashboard opened late or in a new kernel has the whole history,
then follows the live tail). Events are folded into the state as they come, on the
Dask client's thread; a daemon thread copies the state into the widgets at most
``max_rate`` times a second, so a fast run cannot flood the front end and the
kernel's cells stay free.
"""

from __future__ import annotations

import threading
from typing import Any

from ft_notebook.events import Event, subscribe
from ft_notebook.widgets._state import DashboardState


class LiveDashboard:
    def __init__(
        self,
        topics: list[str],
        *,
        run: str | None,
        title: str,
        via: Any = None,
        max_rate: float = 4.0,
        widgets: bool = True,
        since: dict[str, int] | None = None,
        notebook: str | None = None,
    ) -> None:
        self.state = DashboardState(run=run, notebook=notebook)
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._closed = threading.Event()
        self.renders = 0
        self.view: Any = None
        if widgets:
            from ft_notebook.widgets._view import DashboardView

            self.view = DashboardView(title, with_run=run is not None)
        self._period = 1.0 / max_rate
        since = since or {}
        self._subscriptions = [
            subscribe(t, self._on_event, via=via, since=since.get(t, 0)) for t in topics
        ]
        self._flusher = threading.Thread(
            target=self._flush_loop, name="ft-notebook-dashboard", daemon=True
        )
        self._flusher.start()
        self.flush()

    def _on_event(self, event: Event) -> None:
        with self._lock:
            if self.state.apply(event):
                self._changed.set()

    def _flush_loop(self) -> None:
        while not self._closed.is_set():
            self._changed.wait(1.0)
            if self._closed.is_set():
                break
            if self._changed.is_set():
                self._changed.clear()
                self.flush()
                self._closed.wait(self._period)  # at most max_rate renders a second

    def flush(self) -> None:
        """Copy the state into the widgets now."""
        if self.view is None:
            return
        with self._lock:
            self.view.render(self.state)
            self.renders += 1

    def close(self) -> None:
        self._closed.set()
        self._changed.set()
        for sub in self._subscriptions:
            sub.close()
        self._subscriptions = []

    # ---- display

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            bundle = {"text/plain": self.state.text(), "text/html": self.state.html()}
        if self.view is not None:
            widget_bundle = self.view._repr_mimebundle_(**kwargs) or {}
            bundle.update({k: v for k, v in widget_bundle.items() if k != "text/plain"})
        return bundle

    def __repr__(self) -> str:
        with self._lock:
            return self.state.text()
