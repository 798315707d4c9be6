"""What a run notes of its steps and checkpoints: skipped steps, rollbacks, repaired
states, failed and committed checkpoints.

The functions here are the one writer of ``RunBook.noted`` (``notes``, ``nonfinite``,
``lagging``, which rank 0's progress also says in :mod:`._progress_reports`, and what
saves cost), and decide the event each note stands for.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ft_notebook.events import CheckpointFailed, RolledBack, StateRepaired, StepSkipped
from ft_notebook.train.coordinator import _status
from ft_notebook.train.coordinator._actions import Decision
from ft_notebook.train.coordinator._book import RunBook
from ft_notebook.train.protocol import Report
from ft_notebook.train.report_kinds import (
    CheckpointData,
    CheckpointFailedData,
    NonfiniteData,
    RollbackData,
    StateRepairedData,
)

#: Notes a run keeps (the newest).
NOTES_MAX = 200


def _noted(book: RunBook, note: dict[str, Any], **changes: Any) -> RunBook:
    notes = (*book.noted.notes, note)[-NOTES_MAX:]
    return replace(book, noted=replace(book.noted, notes=notes, **changes))


def lagging(book: RunBook, lagging: bool) -> RunBook:
    """Whether checkpoints lag: a save failed and none committed since, or rank 0 says
    saves queue behind a slow one."""
    return replace(book, noted=replace(book.noted, lagging=lagging))


def on_nonfinite(book: RunBook, r: Report, d: Decision) -> RunBook:
    n = NonfiniteData.of(r)
    note = {"kind": r.kind, "time": r.time, "step": n.at_step}
    book = _noted(book, note, nonfinite=book.noted.nonfinite + 1)
    return _status.publish(book, StepSkipped(skipped_step=n.at_step, streak=n.streak), d)


def on_rollback(book: RunBook, r: Report, d: Decision) -> RunBook:
    back = RollbackData.of(r)
    book = _noted(book, {"kind": r.kind, "time": r.time, **back.to_data()})
    book = _status.stepped(book, back.to_step, d)  # the next progress says where it went
    event = RolledBack(from_step=back.from_step, to_step=back.to_step, skipped_steps=back.skipped)
    return _status.publish(book, event, d)


def on_state_repaired(book: RunBook, r: Report, d: Decision) -> RunBook:
    s = StateRepairedData.of(r)
    book = _noted(book, {"kind": r.kind, "time": r.time, **s.to_data()})
    event = StateRepaired(at_step=s.at_step, workers=s.workers, source=s.source, when=s.when)
    return _status.publish(book, event, d)


def on_checkpoint_failed(book: RunBook, r: Report, d: Decision) -> RunBook:
    f = CheckpointFailedData.of(r)
    book = lagging(_noted(book, {"kind": r.kind, "time": r.time, **f.to_data()}), True)
    book = replace(book, noted=replace(book.noted, failing=f.error or "no error given"))
    event = CheckpointFailed(checkpoint_step=r.step, error=f.error, retry_at_step=f.retry_at)
    return _health(_status.publish(book, event, d), d)


def _health(book: RunBook, d: Decision) -> RunBook:
    """Health as the checkpoints leave it (a recovery under way decides its own)."""
    if book.recovery.pending is not None or book.plan is None or book.plan.stop:
        return book
    return _status.update_health(book, d)


def on_checkpoint(book: RunBook, r: Report, d: Decision) -> RunBook:
    c = CheckpointData.of(r)
    # the run got there: the next progress published must not say less
    book = _status.stepped(book, c.checkpoint_step, d, at_least=True)
    book = _status.checkpointed(book, c.checkpoint_step, d)
    book = lagging(book, False)
    noted = book.noted
    if c.stall_s is not None:  # what the save cost training
        noted = replace(noted, checkpoint_costs=(*noted.checkpoint_costs, c.stall_s)[-20:])
    if c.plan is not None:  # checkpoint_every="auto": the new plan
        noted = replace(noted, checkpoint_plan=dict(c.plan))
    failed_before = bool(noted.failing)
    book = replace(book, noted=replace(noted, failing=""))
    return _health(book, d) if failed_before else book
