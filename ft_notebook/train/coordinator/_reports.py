"""What the ranks report, and who in the coordinator handles it.

Reports come through the scheduler's event log (``log_event``). :class:`RunReports`
owns reading them (one it cannot read is logged and dropped; one of a finished run,
or of an earlier run of the same name, is ignored), ``Record.highest_step``, and the
dispatch table: one handler per :class:`~ft_notebook.train.protocol.ReportKind`, each
the method of the part that owns what the report moves on, and each reading the report
as its kind's class (:mod:`ft_notebook.train.report_kinds`). A kind with no handler is
refused when the table is built, so a new kind cannot be dropped unseen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ft_notebook.train.coordinator import _progress_reports
from ft_notebook.train.coordinator._end import RunEnd
from ft_notebook.train.coordinator._generations import Generations
from ft_notebook.train.coordinator._membership import Membership
from ft_notebook.train.coordinator._notes import RunNotes
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.coordinator._recoveries import Recoveries
from ft_notebook.train.protocol import REPORT_TOPIC, Report, ReportKind, UnknownMessage
from ft_notebook.train.report_kinds import payload_of

logger = logging.getLogger("ft_notebook.train.coordinator._plugin")

Handler = Callable[[Record, Report], None]


class RunReports:
    """Reads rank reports and hands each to the handler of its kind."""

    def __init__(
        self,
        runs: dict[str, Record],
        members: Membership,
        plans: Generations,
        recoveries: Recoveries,
        notes: RunNotes,
        end: RunEnd,
    ) -> None:
        self.runs = runs
        self.table: dict[ReportKind, Handler] = {
            ReportKind.READY: members.on_ready,
            ReportKind.SYNCED: plans.on_synced,
            ReportKind.PREPARED: plans.on_prepared,
            ReportKind.RESUMED: recoveries.on_resumed,
            ReportKind.PROGRESS: _progress_reports.on_progress,
            ReportKind.EVAL: _progress_reports.on_eval,
            ReportKind.CHECKPOINT: notes.on_checkpoint,
            ReportKind.CHECKPOINT_FAILED: notes.on_checkpoint_failed,
            ReportKind.NONFINITE: notes.on_nonfinite,
            ReportKind.ROLLBACK: notes.on_rollback,
            ReportKind.STATE_REPAIRED: notes.on_state_repaired,
            ReportKind.PEER_FAILED: recoveries.on_peer_failed,
            ReportKind.DONE: end.on_done,
            ReportKind.ERROR: end.on_error,
        }
        check_covers(self.table)

    def log_event(self, topic: str, msg: Any) -> None:
        if topic != REPORT_TOPIC or not isinstance(msg, dict):
            return
        try:
            report = Report.from_wire(msg)
            payload_of(report)  # a malformed one is refused here, not in its handler
        except UnknownMessage as e:  # never guessed at: a rank of another version?
            logger.error("a rank's report was refused: %s", e)
            return
        record = self.runs.get(report.run)
        if record is None or record.finished:
            return
        if report.incarnation and report.incarnation != record.incarnation:
            return  # a late report of an earlier run of this name
        try:
            self.on_report(record, report)
        except Exception:
            logger.exception("could not handle the report %r", report)

    def on_report(self, record: Record, r: Report) -> None:
        record.highest_step = max(record.highest_step, r.step)
        self.table[r.kind](record, r)


def check_covers(table: dict[ReportKind, Handler]) -> None:
    """Raise :class:`TypeError` naming each :class:`~ft_notebook.train.protocol.ReportKind` that
    ``table`` has no handler for."""
    missing = [k.value for k in ReportKind if k not in table]
    if missing:
        raise TypeError(
            f"no handler for the report kinds {missing}: add one for each to RunReports' table"
        )
