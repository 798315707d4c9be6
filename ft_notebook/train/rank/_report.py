"""What one rank tells: its log lines, its phase, its reports to the coordinator.

:class:`RankReporter` owns the rank's log (kept for ``rank_logs``), its
:class:`~._protocol.Phase` and since when (``rank_state``; the coordinator's stall
watch reads it), and the sending of :class:`~._protocol.Report` s on the scheduler's
event log. The rank's other parts are given it; none of them sends a report itself.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import Any

from ft_notebook.train.protocol import REPORT_TOPIC, Phase, Report, ReportKind

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

    def report(self, kind: ReportKind, **data: Any) -> None:
        gen, step = self.position()
        data = {**data, "incarnation": self.incarnation}
        msg = Report(self.run, self.name, kind, gen, step, time.time(), data)
        try:
            self.worker.log_event(REPORT_TOPIC, msg.to_wire())
        except (TypeError, ValueError):  # refused: a bug, and the coordinator never hears
            logger.error("the %s report was refused by the event log", kind, exc_info=True)
        except Exception:  # the worker is closing: nobody is left to tell
            logger.debug("could not report %s", kind, exc_info=True)

    def set_phase(self, phase: Phase) -> None:
        self.phase, self.phase_since = phase, time.time()
