"""A run followed from a kernel by its events, as the dashboards and the panel follow it.

``Run.wait()`` used to ask the coordinator for the run's whole record ten times a
second: about 119 KB a poll once a run's history is full, 1.2 MB/s for a number on a
progress bar. A :class:`RunFollower` subscribes to the run's topic instead (the
journal first, then the live tail, each event once and in order) and folds it with
:class:`~ft_notebook.runfold.RunView`, the fold every other view reads, so what the
progress bar shows is what the panel shows. The coordinator is still asked, every
:data:`CHECK_S`, for the run's state alone (a few bytes): a scheduler that died, or
events that never came, end the wait with what the coordinator says.
"""

from __future__ import annotations

import threading
from typing import Any

from ft_notebook.events import Event, RunProgress, RunStarted, run_topic, subscribe
from ft_notebook.runfold import RunView

#: Seconds between the checks of the run's state with the coordinator.
CHECK_S = 5.0
#: Once the coordinator says the run ended, how long its last events may take.
LAST_EVENTS_S = 2.0


class RunFollower:
    """The fold of one run's events, kept current by a subscription; close it after."""

    def __init__(self, name: str, client: Any) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._view = RunView()
        self._ended = False
        self._subscription = subscribe(run_topic(name), self._on_event, via=client)

    @property
    def view(self) -> RunView:
        with self._lock:
            return self._view

    @property
    def ended(self) -> bool:
        """The run's end and its last progress (published right after it) are folded:
        nothing the progress bar shows moves any more."""
        with self._lock:
            return self._ended

    def wait_for_change(self, timeout: float) -> RunView:
        """The view once an event moved it, or after ``timeout`` seconds."""
        self._changed.wait(timeout)
        self._changed.clear()
        return self.view

    def close(self) -> None:
        self._subscription.close()

    def _on_event(self, event: Event) -> None:
        with self._lock:
            self._view = self._view.apply(event)
            if event.kind == RunStarted.kind:  # a run resumed under a name used before
                self._ended = False
            elif event.kind == RunProgress.kind:
                state = self._view.state
                self._ended = state is not None and state.finished
        self._changed.set()
