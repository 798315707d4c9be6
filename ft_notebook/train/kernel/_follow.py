"""A run followed from a kernel by its events, as the dashboards and the panel follow it.

``Run.wait()`` used to ask the coordinator for the run's whole record ten times a
second: about 119 KB a poll once a run's history is full, 1.2 MB/s for a number on a
progress bar. A :class:`RunFollower` subscribes to the run's topic instead (the
journal first, then the live tail, each event once and in order) and folds it with
:class:`~ft_notebook.runfold.RunView`, the fold every other view reads, so what the
progress bar shows is what the panel shows. It reads nothing before the
``run-started`` of the run it follows (its ``incarnation``): a journal may hold
earlier runs of the name. The coordinator is still asked, every :data:`CHECK_S`, for
the run's state alone (a few bytes): events that never reach this kernel (a cluster
on another machine journals there) end the wait with what the coordinator says, and
a scheduler that stopped answering raises.
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

    def __init__(self, name: str, client: Any, incarnation: str) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._incarnation = incarnation
        self._current = False  # the run-started of this incarnation has been folded
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
            if event.kind == RunStarted.kind:  # this run, or another run of the name
                started = event.payload()
                self._current = (
                    isinstance(started, RunStarted) and started.incarnation == self._incarnation
                )
                self._ended = False
            if not self._current:
                return
            self._view = self._view.apply(event)
            if event.kind == RunProgress.kind:
                state = self._view.state
                self._ended = state is not None and state.finished
        self._changed.set()
