"""What a run notes of its steps and checkpoints: skipped steps, rollbacks, repaired
states, failed and committed checkpoints.

:class:`RunNotes` keeps ``record.noted`` (``notes``, ``nonfinite``, ``checkpoint``,
``lagging``, which rank 0's progress also sets in :mod:`._history`, and what saves
cost), and publishes the event each note stands for.
"""

from __future__ import annotations

from ft_notebook.events import CheckpointFailed, RolledBack, StateRepaired, StepSkipped
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.coordinator._status import RunStatus
from ft_notebook.train.protocol import Report


class RunNotes:
    """Handles the reports of skipped steps, rollbacks, repairs and checkpoints."""

    def __init__(self, status: RunStatus) -> None:
        self.status = status

    def on_nonfinite(self, record: Record, r: Report) -> None:
        record.noted.nonfinite += 1
        step, streak = int(r.data.get("at_step", r.step)), int(r.data.get("streak", 1))
        record.noted.notes.append({"kind": r.kind, "time": r.time, "step": step})
        self.status.publish(record, StepSkipped(skipped_step=step, streak=streak))

    def on_rollback(self, record: Record, r: Report) -> None:
        record.noted.notes.append({"kind": r.kind, "time": r.time, **r.data})
        self.status.publish(
            record,
            RolledBack(
                from_step=int(r.data["from_step"]),
                to_step=int(r.data["to_step"]),
                skipped_steps=tuple(int(s) for s in r.data.get("skipped", [])),
            ),
        )

    def on_state_repaired(self, record: Record, r: Report) -> None:
        record.noted.notes.append({"kind": r.kind, "time": r.time, **r.data})
        self.status.publish(
            record,
            StateRepaired(
                at_step=int(r.data.get("at_step", r.step)),
                workers=tuple(str(w) for w in r.data.get("workers", [])),
                source=str(r.data.get("source", r.name)),
                when=str(r.data.get("when", "")),
            ),
        )

    def on_checkpoint_failed(self, record: Record, r: Report) -> None:
        record.noted.notes.append({"kind": r.kind, "time": r.time, **r.data})
        record.noted.lagging = True
        self.status.publish(
            record,
            CheckpointFailed(
                checkpoint_step=r.step,
                error=str(r.data.get("error", "")),
                retry_at_step=int(r.data.get("retry_at", 0)),
            ),
        )

    def on_checkpoint(self, record: Record, r: Report) -> None:
        if isinstance(r.data.get("checkpoint_step"), int):
            self.status.checkpointed(record, r.data["checkpoint_step"])
        record.noted.lagging = False
        if isinstance(r.data.get("stall_s"), (int, float)):  # what the save cost training
            record.noted.checkpoint_costs = [
                *record.noted.checkpoint_costs,
                float(r.data["stall_s"]),
            ][-20:]
        if isinstance(r.data.get("plan"), dict):  # checkpoint_every="auto": the new plan
            record.noted.checkpoint_plan = dict(r.data["plan"])
