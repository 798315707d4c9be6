"""Recoveries as the coordinator records them, and collectives that fail with no loss.

:class:`Recoveries` keeps ``record.recovery``: ``pending`` once a loss opened it
(:mod:`._generations`), ``recoveries`` and ``joins`` (a joiner's first step trained),
and ``regrouping``: the count of re-forms of the same members after collectives failed
at one step with no worker lost. Past :data:`~._evictions.REFORMS_CAP` of them a member
the evidence names is evicted (:mod:`._evictions`); with none to evict, the run fails
once its step has stood still for the stall threshold.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ft_notebook.events import RunState
from ft_notebook.runfold import Recovery
from ft_notebook.train.coordinator._end import RunEnd
from ft_notebook.train.coordinator._evictions import REFORMS_CAP, Evictions
from ft_notebook.train.coordinator._generations import Generations
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.coordinator._stall import stall_threshold
from ft_notebook.train.coordinator._status import RunStatus
from ft_notebook.train.protocol import How, Report
from ft_notebook.train.report_kinds import PeerFailedData, ResumedData

logger = logging.getLogger("ft_notebook.train.coordinator._plugin")

#: Seconds a failed collective waits for the control plane's news of a loss.
_LOSS_GRACE_S = 0.5


class Recoveries:
    """Completes recoveries (``resumed``) and re-forms after failed collectives."""

    def __init__(
        self, status: RunStatus, plans: Generations, end: RunEnd, evictions: Evictions
    ) -> None:
        self.status = status
        self.plans = plans
        self.end = end
        self.evictions = evictions

    def on_resumed(self, record: Record, r: Report) -> None:
        """Rank 0 committed the first step of generation ``r.gen``: joiners trained,
        and the recovery that generation was made for, if any, is complete."""
        for name, join in list(record.members.admitting.items()):
            if join["generation"] <= r.gen:  # the joiner trained in this generation
                del record.members.admitting[name]
                join = {
                    **join,
                    "trained_at": r.time,
                    # from its worker registering; and from its rank built and ready
                    # to train (what another tool calls a replica's arrival)
                    "rejoin_s": round(r.time - join["arrived_at"], 3),
                    "from_ready_s": round(r.time - join["ready_at"], 3),
                }
                record.recovery.joins.append(join)
        pending, plan = record.recovery.pending, record.plan
        if pending is None or plan is None or r.gen != plan.gen:
            return
        record.recovery.pending = None
        lost = max(0, int(pending["highest_step"]) - ResumedData.of(r).synced_step)
        recovery = Recovery(
            cause=pending["cause"],
            detected_at=pending["detected_at"],
            resumed_at=r.time,
            rto_s=round(r.time - pending["detected_at"], 4),
            steps_lost=lost,
            workers_before=pending["workers_before"],
            workers_after=len(plan.members),
            how=plan.how,
            generation=plan.gen,
            step=r.step,
            # the members checked that they went on from one state a member vouched for
            verified=plan.gen in record.gens.verified,
        )
        record.step = max(record.step, r.step)
        record.last_advance = time.time()
        # the whole recovery, which the record's view (run.info()) folds as every view does
        self.status.publish(record, recovery.as_payload())
        again = f"recovered with {len(plan.members)} workers"
        self.status.set_state(record, RunState.RUNNING, again)
        self.status.update_health(record)

    def on_peer_failed(self, record: Record, r: Report) -> None:
        """A collective failed before the control plane heard of a loss: give the loss
        a moment to arrive, else form the same members again."""
        self.evictions.on_not_met(record, r)
        plan = record.plan
        d = PeerFailedData.of(r)
        if plan is not None and d.plan == plan.gen:
            error = d.error
            asyncio.get_running_loop().call_later(
                _LOSS_GRACE_S, self.reform_if_stuck, record, plan.gen, r.step, error
            )

    def reform_if_stuck(self, record: Record, gen: int, step: int, error: str) -> None:
        """A collective failed at ``step`` and no loss followed: form the same members
        again. After :data:`~._evictions.REFORMS_CAP` failures in a row at the step,
        a member shown not to meet its peers is evicted and the others go on. With none
        to evict (no evidence, or ``min_workers``), when they keep failing for the run's
        stall threshold (a broken interconnect, a GPU in a bad state), the run fails and
        says so, rather than re-forming for ever while it looks as if it were running."""
        plan = record.plan
        if record.finished or plan is None or plan.gen != gen:
            return
        stuck = record.recovery.regrouping
        if step < 0 and stuck is not None:
            step = stuck["step"]  # a rank that joined with no state yet: no news of progress
        if stuck is None or stuck["step"] != step:  # it got further (or rolled back)
            stuck = record.recovery.regrouping = {"step": step, "since": time.time()}
            stuck.update(count=0, failures=0)
        stuck["count"] += 1  # since the last eviction
        stuck["failures"] += 1
        if stuck["count"] >= REFORMS_CAP and self.evictions.evict_one(
            record, plan, stuck["count"], error
        ):
            stuck["count"] = 0
            return
        waited = time.time() - stuck["since"]
        if stuck["count"] >= REFORMS_CAP and waited >= stall_threshold(record):
            self.end.finish(
                record,
                RunState.FAILED,
                f"the workers' collectives failed {stuck['failures']} times in a row at step "
                f"{stuck['step']} over {waited:.0f} s, with no worker lost (last error: "
                f"{error or 'none given'}), and no member could be evicted: none was "
                f"seen absent from the rendezvous or is new, or evicting one would leave "
                f"fewer than min_workers={record.options.min_workers}. Check that the "
                f"workers can "
                f"reach each other (ft-notebook.cluster.interface, NCCL_DEBUG=INFO on "
                f"GPUs), then go on from the newest checkpoint with ft.fit(..., resume=True).",
            )
            return
        logger.warning(
            "run %s: a collective failed at step %s (%s); forming the same %d workers "
            "again (%d in a row)",
            record.name,
            step,
            error,
            len(plan.members),
            stuck["failures"],
        )
        members = [m for m in plan.members if m in record.members.actors]
        if len(members) >= record.options.min_workers and members:
            self.plans.new_plan(record, members, How.FORM)
