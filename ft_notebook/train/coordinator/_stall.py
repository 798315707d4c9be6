"""Hangs that heartbeats do not show: a rank whose step stops advancing while its
heartbeats go on.

:class:`StallWatch` owns the coordinator's watchdog loop (two checks a second): it
publishes each running run's progress (:mod:`._publisher`) and, once a
run's step has stood still for :func:`stall_threshold`, asks the members where they
are. A member stuck computing is evicted (the others go on without it); every member
stuck fails the run. ``Record.last_advance`` is the time the step last moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import statistics
import time

from ft_notebook.events import RunState
from ft_notebook.train.coordinator._end import RunEnd
from ft_notebook.train.coordinator._generations import Generations
from ft_notebook.train.coordinator._link import SchedulerLink
from ft_notebook.train.coordinator._publisher import ProgressPublisher
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.protocol import Phase, RankOp

logger = logging.getLogger("ft_notebook.train.coordinator._plugin")

#: A step every rank is stuck in fails the run after this many stall thresholds (one
#: stuck rank is evicted after one: the others go on without it).
_ALL_STUCK_AFTER = 3
#: Seconds the watchdog sleeps between two checks.
_CHECK_EVERY_S = 0.5


def stall_threshold(record: Record) -> float:
    """Seconds a step may stand still before it is a hang: the options' floor for the
    first steps, then ``stall_factor`` x the median step time (at least ``stall_min_s``)."""
    o = record.options
    if len(record.progress.step_times) < 5:
        return o.first_steps_floor_s
    return max(o.stall_min_s, o.stall_factor * statistics.median(record.progress.step_times))


class StallWatch:
    """The watchdog loop: progress for dashboards, and stuck ranks evicted."""

    def __init__(
        self,
        runs: dict[str, Record],
        link: SchedulerLink,
        plans: Generations,
        progress: ProgressPublisher,
        end: RunEnd,
    ) -> None:
        self.runs = runs
        self.link = link
        self.plans = plans
        self.progress = progress
        self.end = end

    async def watchdog(self) -> None:
        while True:
            await asyncio.sleep(_CHECK_EVERY_S)
            for record in list(self.runs.values()):
                try:
                    if not record.finished:
                        self.progress.publish(record)
                    await self.check_stall(record)
                except Exception:
                    logger.exception("stall check of %s failed", record.name)

    async def check_stall(self, record: Record) -> None:
        plan = record.plan
        active = (RunState.RUNNING, RunState.RECOVERING)
        if record.state not in active or plan is None or plan.stop:
            return
        threshold = stall_threshold(record)
        if time.time() - record.last_advance < threshold:
            return
        states = {}
        for name in plan.members:
            address = record.members.actors.get(name)
            if address is not None:
                with contextlib.suppress(Exception):
                    states[name] = json.loads(
                        await asyncio.wait_for(
                            self.link.call(address, RankOp.STATE, run=record.name), 5
                        )
                    )
        stuck = [n for n, s in states.items() if s and s.get("phase") == Phase.COMPUTE]
        if not stuck:
            return
        if len(stuck) == len(plan.members):  # no healthy rank to go on with
            waited = time.time() - record.last_advance
            if waited >= _ALL_STUCK_AFTER * threshold:
                at = sorted({str(states[n].get("step")) for n in stuck})  # theirs: newer
                self.end.finish(
                    record,
                    RunState.FAILED,
                    f"every worker ({', '.join(stuck)}) has been computing step "
                    f"{' or '.join(at)} for {waited:.0f} s, {_ALL_STUCK_AFTER}x the run's stall "
                    f"threshold: the training code or its data loading hangs on all of "
                    f"them (a deadlock, a hung filesystem). Their logs (run.logs()) say "
                    f"where; fix that, then go on from the newest checkpoint with "
                    f"ft.fit(..., resume=True).",
                )
            return
        for name in stuck:
            address = record.members.actors.get(name)
            logger.warning(
                "run %s: %s has not finished step %s in %.0f s: evicting it",
                record.name,
                name,
                record.step,
                threshold,
            )
            if address is not None:
                self.plans.drop(record, name, f"step not advancing for {threshold:.0f} s")
                self.link.spawn(self.link.control.evict(address))
        record.last_advance = time.time()
