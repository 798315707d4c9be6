"""The end of a run: completed, failed or cancelled.

:class:`RunEnd` owns ``Record.finished_at`` and what ending a run does, once: the
last state and progress published, the stop plan sent to every rank, the run's hold
on the cluster released. It also reads the ranks' own word that the run ended
(``done`` and ``error`` reports, and ``Record.errors``).
"""

from __future__ import annotations

import time

from ft_notebook.events import RunState
from ft_notebook.train.coordinator import _progress_reports
from ft_notebook.train.coordinator._generations import Generations
from ft_notebook.train.coordinator._link import SchedulerLink
from ft_notebook.train.coordinator._publisher import ProgressPublisher
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.coordinator._status import RunStatus
from ft_notebook.train.protocol import How, Report
from ft_notebook.train.report_kinds import DoneData, ErrorData


class RunEnd:
    """Ends runs, and handles the reports that end them."""

    def __init__(
        self,
        link: SchedulerLink,
        status: RunStatus,
        plans: Generations,
        progress: ProgressPublisher,
    ) -> None:
        self.link = link
        self.status = status
        self.plans = plans
        self.progress = progress

    def finish(self, record: Record, state: RunState, reason: str) -> None:
        record.finished_at = time.time()
        record.spec = b""  # the pickled factories and dataset are not needed any more
        self.status.set_state(record, state, reason)
        self.progress.publish(record, force=True)
        self.plans.new_plan(record, [], How.FORM, stop=state.value.lower())
        self.link.control.release(f"run:{record.name}")

    def on_done(self, record: Record, r: Report) -> None:
        d = DoneData.of(r)
        _progress_reports.add_robust_window(record, d)  # the steps after the last progress
        record.step = r.step
        if d.epoch is not None:
            record.epoch = d.epoch
        if d.loss is not None:
            record.loss = d.loss
        if d.checkpoint is not None:  # the run's last one
            self.status.checkpointed(record, d.checkpoint)
        self.finish(record, RunState.COMPLETED, f"{r.step} steps")

    def on_error(self, record: Record, r: Report) -> None:
        d = ErrorData.of(r)
        record.errors[r.name] = {"error": d.error, "traceback": d.traceback}
        self.finish(record, RunState.FAILED, f"{r.name}: {d.error}")
