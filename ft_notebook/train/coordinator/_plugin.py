"""The run coordinator: a SchedulerPlugin that drives every training run of a cluster.

It lives in the scheduler, so a run goes on when the notebook kernel that started it
dies. It is thin: it keeps each run's book (``runs``: name ->
:class:`~._book.RunBook`, replaced whole after each decision), turns what the
scheduler hands it into inputs (:mod:`._inputs`: rank reports from the event log,
the control plane's news of workers, the kernels' calls through its scheduler
handler ``ft_train``, the watchdog's ticks, its own ``close``), feeds them to the
pure :func:`~.decide.decide` one at a time, on the scheduler's event loop, and
carries out the actions that come back (:mod:`._carry_out`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from ft_notebook._paths import checked_name
from ft_notebook.cluster.plugins import control_plane
from ft_notebook.exceptions import TrainingError
from ft_notebook.train.coordinator._actions import Action
from ft_notebook.train.coordinator._book import RunBook, info
from ft_notebook.train.coordinator._carry_out import carry_out
from ft_notebook.train.coordinator._inputs import (
    Cancelled,
    ClusterClosing,
    Input,
    Reported,
    Tick,
    WorkerNews,
)
from ft_notebook.train.coordinator._link import SchedulerLink
from ft_notebook.train.coordinator.decide import decide, start
from ft_notebook.train.protocol import (
    REPORT_TOPIC,
    SCHEDULER_HANDLER,
    Report,
    RunAction,
    UnknownMessage,
)
from ft_notebook.train.report_kinds import payload_of
from ft_notebook.train.spec import RunOptions

logger = logging.getLogger("ft_notebook.train.coordinator._plugin")

PLUGIN_NAME = "ft-notebook-runs"

#: Seconds between two watchdog ticks.
TICK_EVERY_S = 0.5


class RunCoordinator(SchedulerPlugin):
    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.runs: dict[str, RunBook] = {}
        self.link = SchedulerLink()
        self._watchdog: asyncio.Task[None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    async def start(self, scheduler: Any) -> None:
        scheduler.handlers[SCHEDULER_HANDLER] = self.handle
        self.link.scheduler = scheduler
        self.link.control = control_plane(scheduler)
        self.link.control.add_listener(self.on_membership)
        self._watchdog = asyncio.ensure_future(self._tick())

    async def close(self) -> None:
        for name in list(self.runs):
            self.feed(name, ClusterClosing(time.time()))
        self.link.control.remove_listener(self.on_membership)
        if self._watchdog is not None:
            self._watchdog.cancel()
        self.link.cancel_tasks()

    # ---- the one door of every input

    def feed(self, name: str, event: Input) -> None:
        """Decide on ``event`` for run ``name`` and carry out what was decided."""
        book = self.runs.get(name)
        if book is None:
            return
        book, actions = decide(book, event)
        self.runs[name] = book
        self._carry_out(book, actions)

    def _carry_out(self, book: RunBook, actions: tuple[Action, ...]) -> None:
        carry_out(self.link, book.name, book.spec, book.incarnation, actions, self.feed)

    def log_event(self, topic: str, msg: Any) -> None:
        """Rank reports arrive through the scheduler's event log."""
        if topic != REPORT_TOPIC or not isinstance(msg, dict):
            return
        try:
            report = Report.from_wire(msg)
            payload_of(report)  # a malformed one is refused here, not by a rule
        except UnknownMessage as e:  # never guessed at: a rank of another version?
            logger.error("a rank's report was refused: %s", e)
            return
        try:
            self.feed(report.run, Reported(time.time(), report))
        except Exception:
            logger.exception("could not handle the report %r", report)

    def on_membership(self, kind: str, name: str, address: str, cause: str) -> None:
        """The control plane's news of worker ``name``: ``lost``, ``hung`` or ``joined``."""
        for run in list(self.runs):
            self.feed(run, WorkerNews(time.time(), kind, name, address, cause))

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_EVERY_S)
            for name in list(self.runs):
                try:
                    self.feed(name, Tick(time.time()))
                except Exception:
                    logger.exception("the watchdog's tick of %s failed", name)

    # ---- the kernels' entry point (protocol.SCHEDULER_HANDLER)

    def handle(self, action: str, **kwargs: Any) -> Any:
        try:
            method = _ACTIONS[RunAction(action)]
        except ValueError:
            raise TrainingError(
                f"Unknown run action {action!r}; this scheduler knows "
                f"{sorted(a.value for a in RunAction)}. Are the kernel and the cluster on "
                f"the same ft_notebook version?"
            ) from None
        return method(self, **kwargs)

    def submit(self, name: str, spec: bytes, options: dict[str, Any]) -> dict[str, Any]:
        existing = self.runs.get(name)
        if existing is not None and not existing.finished:
            raise TrainingError(
                f"A run named {name!r} is already {existing.state.value} on this cluster. "
                f"Attach to it with ft.attach({name!r}), or pick another name."
            )
        name = checked_name(name, "run name")  # before anything keeps it
        address = str(getattr(self.link.scheduler, "address", "") or "")
        book, actions = start(
            name,
            spec,
            RunOptions.from_wire(options),
            time.time(),
            cluster=_registered_name(address),
            scheduler=address,
            process=_this_process(),
        )
        self.runs[name] = book
        self._carry_out(book, actions)
        return info(self.runs[name])

    def cancel(self, name: str) -> dict[str, Any]:
        self._get(name)
        self.feed(name, Cancelled(time.time()))
        return info(self.runs[name])

    def info(self, name: str) -> dict[str, Any]:
        return info(self._get(name))

    def state(self, name: str) -> str:
        return self._get(name).state.value

    def names(self) -> list[str]:
        """The runs' names, oldest first."""
        return sorted(self.runs, key=lambda n: self.runs[n].started_at)

    def _get(self, name: str) -> RunBook:
        book = self.runs.get(name)
        if book is None:
            raise TrainingError(
                f"No run named {name!r} on this cluster (runs here: {sorted(self.runs)})."
            )
        return book


_ACTIONS: dict[RunAction, Callable[..., Any]] = {
    RunAction.SUBMIT: RunCoordinator.submit,
    RunAction.INFO: RunCoordinator.info,
    RunAction.STATE: RunCoordinator.state,
    RunAction.CANCEL: RunCoordinator.cancel,
    RunAction.NAMES: RunCoordinator.names,
}


def _this_process() -> tuple[str, int, float]:
    """The scheduler's process, as a view on its host can check it is still there."""
    import psutil

    me = psutil.Process()
    return socket.gethostname(), me.pid, me.create_time()


def _registered_name(address: str) -> str:
    """The name of the user's registered cluster at ``address``, or ``""``."""
    from ft_notebook.cluster import clusters

    try:
        return next((c.name for c in clusters() if c.address == address), "")
    except Exception:  # an unreadable registry costs the view this fact, not the run
        logger.exception("could not read the cluster registry")
        return ""
