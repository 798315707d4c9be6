"""What the ranks report, and which rule of the coordinator decides on it.

:func:`on_report` is the one writer of ``RunBook.highest_step`` and dispatches by
kind through :data:`HANDLERS`: one function per
:class:`~ft_notebook.train.protocol.ReportKind`, each of the module that owns what
the report moves on, each reading the report as its kind's class
(:mod:`ft_notebook.train.report_kinds`). A kind with no handler is refused when this
module is imported (:func:`check_covers`), so a new kind cannot be dropped unseen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ft_notebook.train.coordinator import (
    _end,
    _generations,
    _membership,
    _notes,
    _progress_reports,
    _recoveries,
)
from ft_notebook.train.coordinator._actions import Decision
from ft_notebook.train.coordinator._book import RunBook
from ft_notebook.train.protocol import Report, ReportKind

Handler = Callable[[RunBook, Report, Decision], RunBook]


def check_covers(table: dict[ReportKind, Handler]) -> None:
    """Raise :class:`TypeError` naming each :class:`~ft_notebook.train.protocol.ReportKind`
    that ``table`` has no handler for."""
    missing = [k.value for k in ReportKind if k not in table]
    if missing:
        raise TypeError(f"no handler for the report kinds {missing}: add one for each to HANDLERS")


HANDLERS: dict[ReportKind, Handler] = {
    ReportKind.READY: _membership.on_ready,
    ReportKind.SYNCED: _membership.on_synced,
    ReportKind.PREPARED: _generations.on_prepared,
    ReportKind.RESUMED: _recoveries.on_resumed,
    ReportKind.PROGRESS: _progress_reports.on_progress,
    ReportKind.EVAL: _progress_reports.on_eval,
    ReportKind.CHECKPOINT: _notes.on_checkpoint,
    ReportKind.CHECKPOINT_FAILED: _notes.on_checkpoint_failed,
    ReportKind.NONFINITE: _notes.on_nonfinite,
    ReportKind.ROLLBACK: _notes.on_rollback,
    ReportKind.STATE_REPAIRED: _notes.on_state_repaired,
    ReportKind.PEER_FAILED: _recoveries.on_peer_failed,
    ReportKind.DONE: _end.on_done,
    ReportKind.ERROR: _end.on_error,
}
check_covers(HANDLERS)


def on_report(book: RunBook, r: Report, d: Decision) -> RunBook:
    """A report of this run's incarnation (the plugin drops late ones of another);
    one of a run that ended changes nothing."""
    if book.finished or (r.incarnation and r.incarnation != book.incarnation):
        return book
    book = replace(book, highest_step=max(book.highest_step, r.step))
    return HANDLERS[r.kind](book, r, d)
