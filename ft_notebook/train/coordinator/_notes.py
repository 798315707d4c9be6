"""What a run notes of its steps and checkpoints: skipped steps, rollbacks, repaired
states, failed and committed checkpoints.

:class:`RunNotes` keeps ``record.noted`` (``notes``, ``nonfinite``, ``checkpoint``,
``lagging``, which rank 0's progress also sets in :mod:`._progress_reports`, and what saves
cost), and publishes the event each note stands for.
"""

from __future__ import annotations

from ft_notebook.events import CheckpointFailed, RolledBack, StateRepaired, StepSkipped
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.coordinator._status import RunStatus
from ft_notebook.train.protocol import Report
from ft_notebook.train.report_kinds import (
    CheckpointData,
    CheckpointFailedData,
    NonfiniteData,
    RollbackData,
    StateRepairedData,
)


class RunNotes:
    """Handles the reports of skipped steps, rollbacks, repairs and checkpoints."""

    def __init__(self, status: RunStatus) -> None:
        self.status = status

    def on_nonfinite(self, record: Record, r: Report) -> None:
        d = NonfiniteData.of(r)
        record.noted.nonfinite += 1
        record.noted.notes.append({"kind": r.kind, "time": r.time, "step": d.at_step})
        self.status.publish(record, StepSkipped(skipped_step=d.at_step, streak=d.streak))

    def on_rollback(self, record: Record, r: Report) -> None:
        d = RollbackData.of(r)
        record.step = d.to_step  # the next progress published says where it went
        record.noted.notes.append({"kind": r.kind, "time": r.time, **d.to_data()})
        self.status.publish(
            record, RolledBack(from_step=d.from_step, to_step=d.to_step, skipped_steps=d.skipped)
        )

    def on_state_repaired(self, record: Record, r: Report) -> None:
        d = StateRepairedData.of(r)
        record.noted.notes.append({"kind": r.kind, "time": r.time, **d.to_data()})
        self.status.publish(
            record,
            StateRepaired(at_step=d.at_step, workers=d.workers, source=d.source, when=d.when),
        )

    def on_checkpoint_failed(self, record: Record, r: Report) -> None:
        d = CheckpointFailedData.of(r)
        record.noted.notes.append({"kind": r.kind, "time": r.time, **d.to_data()})
        record.noted.lagging = True
        self.status.publish(
            record,
            CheckpointFailed(checkpoint_step=r.step, error=d.error, retry_at_step=d.retry_at),
        )

    def on_checkpoint(self, record: Record, r: Report) -> None:
        d = CheckpointData.of(r)
        # the run got there: the next progress published must not say less
        record.step = max(record.step, d.checkpoint_step)
        self.status.checkpointed(record, d.checkpoint_step)
        record.noted.lagging = False
        if d.stall_s is not None:  # what the save cost training
            record.noted.checkpoint_costs = [*record.noted.checkpoint_costs, d.stall_s][-20:]
        if d.plan is not None:  # checkpoint_every="auto": the new plan
            record.noted.checkpoint_plan = dict(d.plan)
