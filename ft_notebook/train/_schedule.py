"""When rank 0 checkpoints: every N steps, or (``checkpoint_every="auto"``) Daly's
interval from what the run measures.

Daly's optimum (:mod:`ft_notebook.plan`) needs the save cost δ and the mean time
between failures M. A run measures δ itself: a save is asynchronous, so what it costs
the run is the time training stands still while the state is copied out (the save's
*stall*), not the write that follows in the background. M comes from the kernel (the
``ft-notebook.train.mtbf`` setting, or the failures this cluster's journal recorded).
The first save comes after :data:`FIRST_AUTO_STEP` steps, to measure δ early; every
save then plans again from the newest δ and step time, so a state that grows or a
store that slows down moves the interval with it. The interval in steps is τ over
the median step time, at least 1.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from ft_notebook.plan import CheckpointPlan, plan

#: The first save of an "auto" run: early, so its cost is measured before planning.
FIRST_AUTO_STEP = 10
#: Saves whose stalls the plan takes the median of.
_COSTS_KEPT = 5


@dataclass(frozen=True)
class Planned:
    """The newest plan of an "auto" run: the interval in steps, and the plan in seconds
    it came from (δ, M, Daly's τ, the waste)."""

    every: int
    step_time_s: float
    plan: CheckpointPlan


class CheckpointSchedule:
    """Rank 0's checkpoint steps (see the module doc)."""

    def __init__(self, every: int | None, mtbf_s: float) -> None:
        self.auto = every is None
        self.every = every if every is not None else FIRST_AUTO_STEP
        self.mtbf_s = mtbf_s
        self.next_step = self.every
        self.planned: Planned | None = None
        self._costs: deque[float] = deque(maxlen=_COSTS_KEPT)

    def due(self, step: int) -> bool:
        """Whether a save is due once ``step`` steps are committed."""
        if not self.auto:
            return step % self.every == 0
        return step >= self.next_step

    def saved(self, step: int, stall_s: float, step_time_s: float | None) -> Planned | None:
        """A save of ``step`` held training ``stall_s``: the next due step, planned
        again from the measured cost (auto only); the new plan, if one was made."""
        if not self.auto:
            return None
        self._costs.append(max(stall_s, 1e-6))  # a save costs something, however fast
        if step_time_s is None or not step_time_s > 0:
            self.next_step = step + self.every  # no step time yet: the same interval
            return None
        made = plan(self.mtbf_s, statistics.median(self._costs))
        self.every = max(1, round(made.interval / step_time_s))
        self.next_step = step + self.every
        self.planned = Planned(self.every, step_time_s, made)
        return self.planned
