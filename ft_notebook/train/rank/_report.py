"""What one rank tells: its log lines, its phase, its reports to the coordinator.

:class:`RankReporter` owns the rank's log (kept for ``rank_logs``), its
:class:`~ft_notebook.train.protocol.Phase` and since when (``rank_state``; the
coordinator's stall watch reads it), and the sending of reports on the scheduler's
event log, each built as its kind's class (:mod:`ft_notebook.train.report_kinds`).
The rank's other parts are given it; none of them sends a report itself.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import Any

from ft_notebook.train.protocol import REPORT_TOPIC, Phase, Report
from ft_notebook.train.report_kinds import ReportData

logger = logging.getLogger("ft_notebook.train.rank")

#: Log lines a rank keeps for ``rank_logs``.
_KEEP_LINES = 2000


class RankReporter:
    """The log, phase and reports of one rank actor.

    ``position`` says (generation, committed step) at the time of a report: it is read
    at each report, from whichever thread sends it (a checkpoint's commit reports from
    the store's writer thread).
    """

    def __init__(
        self,
        run: str,
        name: str,
        incarnation: str,
        worker: Any,
        position: Callable[[], tuple[int, int]],
    ) -> None:
        self.run, self.name, self.incarnation = run, name, incarnation
        self.worker = worker
        self.position = position
        self.lines: collections.deque[str] = collections.deque(maxlen=_KEEP_LINES)
        self.phase, self.phase_since = Phase.WARMING, time.time()

    def log(self, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} [{self.name}] {message}"
        self.lines.append(line)
        logger.info(line)

    def report(self, payload: ReportData) -> None:
        """Send ``payload`` as a report of its kind (a report refused is logged as an
        error: a bug, and the coordinator never hears of it)."""
        kind = payload.KIND
        gen, step = self.position()
        try:
            data = payload.to_data()  # a field of the wrong type is refused here
            msg = Report(self.run, self.name, kind, gen, step, time.time(), data, self.incarnation)
            self.worker.log_event(REPORT_TOPIC, msg.to_wire())
        except (TypeError, ValueError):  # UnknownMessage too
            logger.error("the %s report was refused", kind.value, exc_info=True)
        except Exception:  # the worker is closing: nobody is left to tell
            logger.debug("could not report %s", kind.value, exc_info=True)

    def set_phase(self, phase: Phase) -> None:
        self.phase, self.phase_since = phase, time.time()
