"""The run coordinator: a SchedulerPlugin that drives every training run of a cluster.

It lives in the scheduler, so a run goes on when the notebook kernel that started it
dies. :class:`RunCoordinator` owns the runs' records (``runs``: name ->
:class:`~._record.Record`), the API the kernels call through
its scheduler handler ``ft_train`` (:class:`~ft_notebook.train.protocol.RunAction`), and
the plugin's life (``start``, ``close``, ``log_event``). The work is done by the
parts it wires together, each given what it needs:

- :class:`~._link.SchedulerLink`: calls to workers, the control plane, background tasks;
- :class:`~._status.RunStatus`: state and health transitions, events on the run's topic;
- :class:`~._publisher.ProgressPublisher`: progress for dashboards;
- :class:`~._generations.Generations`: plans, their delivery, what a loss does;
- :class:`~._end.RunEnd`: the end of a run;
- :class:`~._membership.Membership`: rank actors, joiners, the control plane's news;
- :class:`~._recoveries.Recoveries`: recoveries completed, failed collectives, and
  through :class:`~._evictions.Evictions` a member that cannot meet its peers evicted;
- :class:`~._notes.RunNotes`: skipped steps, rollbacks, repairs, checkpoints;
- :class:`~._reports.RunReports`: rank reports, dispatched by kind (:mod:`._progress_reports`
  handles progress and evaluations);
- :class:`~._stall.StallWatch`: the watchdog loop, hangs heartbeats do not show.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from ft_notebook._paths import checked_name
from ft_notebook.cluster.plugins import control_plane
from ft_notebook.events import RunState
from ft_notebook.exceptions import TrainingError
from ft_notebook.train.coordinator._end import RunEnd
from ft_notebook.train.coordinator._evictions import Evictions
from ft_notebook.train.coordinator._generations import Generations
from ft_notebook.train.coordinator._link import SchedulerLink
from ft_notebook.train.coordinator._membership import Membership
from ft_notebook.train.coordinator._notes import RunNotes
from ft_notebook.train.coordinator._publisher import ProgressPublisher
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.coordinator._recoveries import Recoveries
from ft_notebook.train.coordinator._reports import RunReports
from ft_notebook.train.coordinator._stall import StallWatch
from ft_notebook.train.coordinator._status import RunStatus
from ft_notebook.train.protocol import SCHEDULER_HANDLER, RunAction
from ft_notebook.train.spec import RunOptions

PLUGIN_NAME = "ft-notebook-runs"


class RunCoordinator(SchedulerPlugin):
    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.runs: dict[str, Record] = {}
        self.link = SchedulerLink()
        self.status = RunStatus(self.link)
        self.progress = ProgressPublisher(self.link, self.status)
        self.plans = Generations(self.link, self.status, self.progress)
        self.end = RunEnd(self.link, self.status, self.plans, self.progress)
        self.members = Membership(
            self.runs, self.link, self.status, self.plans, self.progress, self.end
        )
        self.recoveries = Recoveries(
            self.status, self.plans, self.end, Evictions(self.link, self.plans)
        )
        self.reports = RunReports(
            self.runs, self.members, self.plans, self.recoveries, RunNotes(self.status), self.end
        )
        self.watch = StallWatch(self.runs, self.link, self.plans, self.progress, self.end)
        self._watchdog: asyncio.Task[None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    async def start(self, scheduler: Any) -> None:
        scheduler.handlers[SCHEDULER_HANDLER] = self.handle
        self.link.scheduler = scheduler
        self.link.control = control_plane(scheduler)
        self.link.control.add_listener(self.members.on_membership)
        self._watchdog = asyncio.ensure_future(self.watch.watchdog())

    async def close(self) -> None:
        # A run ends with its cluster: said here, or its journal would say RUNNING for
        # ever (the panel, the status bar and a re-attaching kernel read it).
        for record in self.runs.values():
            if not record.finished:
                self.end.finish(record, RunState.CANCELLED, "its cluster shut down")
        self.link.control.remove_listener(self.members.on_membership)
        if self._watchdog is not None:
            self._watchdog.cancel()
        self.link.cancel_tasks()

    def log_event(self, topic: str, msg: Any) -> None:
        self.reports.log_event(topic, msg)

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
        record = Record(name, spec, RunOptions.from_wire(options))
        self.runs[name] = record
        self.status.started(record)
        self.link.control.hold(f"run:{name}")
        self.link.spawn(self.members.launch(record))
        return record.info()

    def cancel(self, name: str) -> dict[str, Any]:
        record = self._get(name)
        if not record.finished:
            self.end.finish(record, RunState.CANCELLED, "cancelled by the user")
        return record.info()

    def info(self, name: str) -> dict[str, Any]:
        return self._get(name).info()

    def state(self, name: str) -> str:
        return self._get(name).state.value

    def names(self) -> list[str]:
        """The runs' names, oldest first."""
        return sorted(self.runs, key=lambda n: self.runs[n].started_at)

    def _get(self, name: str) -> Record:
        record = self.runs.get(name)
        if record is None:
            raise TrainingError(
                f"No run named {name!r} on this cluster (runs here: {sorted(self.runs)})."
            )
        return record


_ACTIONS: dict[RunAction, Callable[..., Any]] = {
    RunAction.SUBMIT: RunCoordinator.submit,
    RunAction.INFO: RunCoordinator.info,
    RunAction.STATE: RunCoordinator.state,
    RunAction.CANCEL: RunCoordinator.cancel,
    RunAction.NAMES: RunCoordinator.names,
}
