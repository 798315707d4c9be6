"""The run coordinator: a SchedulerPlugin that drives every training run of a cluster.

It lives in the scheduler, so a run goes on when the notebook kernel that started it
dies. :class:`RunCoordinator` owns the runs' records (``runs``: name ->
:class:`~._record.Record`), the API the kernels call through
``Client.run_on_scheduler`` (:mod:`._remote`: ``submit``, ``info``, ``cancel``), and
the plugin's life (``start``, ``close``, ``log_event``). The work is done by the
parts it wires together, each given what it needs:

- :class:`~._link.SchedulerLink`: calls to workers, the control plane, background tasks;
- :class:`~._status.RunStatus`: state and health transitions, events on the run's topic;
- :class:`~._progress_publisher.ProgressPublisher`: progress for dashboards;
- :class:`~._generations.Generations`: plans, their delivery, what a loss does;
- :class:`~._end.RunEnd`: the end of a run;
- :class:`~._membership.Membership`: rank actors, joiners, the control plane's news;
- :class:`~._recoveries.Recoveries`: recoveries completed, failed collectives, and
  through :class:`~._evictions.Evictions` a member that cannot meet its peers evicted;
- :class:`~._notes.RunNotes`: skipped steps, rollbacks, repairs, checkpoints;
- :class:`~._reports.RunReports`: rank reports, dispatched by kind (:mod:`._history`
  handles progress and evaluations);
- :class:`~._stall.StallWatch`: the watchdog loop, hangs heartbeats do not show.
"""

from __future__ import annotations

import asyncio
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from ft_notebook.cluster.plugins import control_plane
from ft_notebook.events import RunState
from ft_notebook.train._end import RunEnd
from ft_notebook.train._evictions import Evictions
from ft_notebook.train._generations import Generations
from ft_notebook.train._link import SchedulerLink
from ft_notebook.train._membership import Membership
from ft_notebook.train._notes import RunNotes
from ft_notebook.train._progress_publisher import ProgressPublisher
from ft_notebook.train._record import Options, Record
from ft_notebook.train._recoveries import Recoveries
from ft_notebook.train._reports import RunReports
from ft_notebook.train._stall import StallWatch
from ft_notebook.train._status import RunStatus

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

    # ---- API (through Client.run_on_scheduler)

    def submit(self, name: str, spec: bytes, options: Options) -> dict[str, Any]:
        existing = self.runs.get(name)
        if existing is not None and not existing.finished:
            from ft_notebook.exceptions import TrainingError

            raise TrainingError(
                f"A run named {name!r} is already {existing.state.value} on this cluster. "
                f"Attach to it with ft.attach({name!r}), or pick another name."
            )
        record = Record(name, spec, options)
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

    def _get(self, name: str) -> Record:
        record = self.runs.get(name)
        if record is None:
            from ft_notebook.exceptions import TrainingError

            raise TrainingError(
                f"No run named {name!r} on this cluster (runs here: {sorted(self.runs)})."
            )
        return record


def coordinator(scheduler: Any) -> RunCoordinator:
    plugin = scheduler.plugins.get(PLUGIN_NAME)
    if not isinstance(plugin, RunCoordinator):
        from ft_notebook.exceptions import TrainingError

        raise TrainingError("The scheduler has no run coordinator; ft.fit installs it.")
    return plugin
