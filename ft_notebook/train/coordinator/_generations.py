"""Generations: which workers train together, and how their group is made.

:class:`Generations` owns ``record.plan`` and ``record.gens`` (the world sizes, and
the per-generation reports ``synced``, ``verified`` and ``prepared`` that decide how
the next loss is recovered), the sends of each new plan to the rank actors, the
rendezvous keys of retired groups, and what a loss does to the run (it opens
``record.recovery.pending``).

Recovery (see :mod:`ft_notebook.train.protocol`): a single lost rank of a generation whose survivor
groups are ready takes the fast path (:attr:`~ft_notebook.train.protocol.How.SURVIVE`: no
rendezvous); anything else, or the fast path turned off, forms a new group
(:attr:`~ft_notebook.train.protocol.How.FORM`). Fewer than ``min_workers`` survivors park the ranks
(STALLED) until workers come back.
"""

from __future__ import annotations

import time

from ft_notebook.events import Health, RunState
from ft_notebook.train.coordinator._link import SchedulerLink
from ft_notebook.train.coordinator._publisher import ProgressPublisher
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.coordinator._status import RunStatus
from ft_notebook.train.protocol import How, Plan, RankOp, Report, generation_prefix
from ft_notebook.train.report_kinds import PreparedData, SyncedData


class Generations:
    """New plans, their delivery, and the decisions a loss takes."""

    def __init__(self, link: SchedulerLink, status: RunStatus, progress: ProgressPublisher):
        self.link = link
        self.status = status
        self.progress = progress
        self.store_address: tuple[str, int] = ("", 0)  # the rendezvous TCPStore

    def new_plan(
        self, record: Record, members: list[str], how: How, lost: str | None = None, stop: str = ""
    ) -> Plan:
        """The run's next generation, sent to every rank actor. No members: the ranks
        park; ``stop``: they stop for good."""
        old = record.plan
        record.gens.parts = max(record.gens.parts, len(members))
        plan = Plan(
            run=record.name,
            gen=(old.gen if old is not None else 0) + 1,
            members=tuple(members),
            store=self.store_address,
            how=how,
            base=old.gen if old is not None and how is How.SURVIVE else None,
            lost=lost,
            stop=stop,
            committed=record.highest_step,
            incarnation=record.incarnation,
            parts=record.gens.parts,
        )
        record.plan = plan
        self.forget_retired(record, plan)
        if not stop:
            record.gens.world = len(plan.members)
        told = dict(record.members.actors)
        if plan.stop:  # evicted actors too, in case their own stop plan was lost
            told.update(record.members.retired)
        for name, address in told.items():
            self.link.spawn(self.deliver(record, name, address, plan))
        return plan

    def forget_retired(self, record: Record, plan: Plan) -> None:
        """Delete the rendezvous keys of groups that can never be used again: those of
        generation gen-2 and older (gen-1's survivor groups may still be switched to,
        and an NCCL group reads its keys at its first collective), or all of them
        once the run stops."""
        if plan.stop:
            prefix = generation_prefix(record.name, record.incarnation)
        elif plan.gen > 2:
            prefix = generation_prefix(record.name, record.incarnation, plan.gen - 2)
        else:
            return
        self.link.spawn(self.link.control.forget_rendezvous(prefix))

    async def deliver(self, record: Record, name: str, address: str, plan: Plan) -> None:
        """Send ``plan`` to the rank on ``address``; a member whose actor is gone is lost."""
        try:
            answer = await self.link.call(
                address, RankOp.DELIVER, run=record.name, plan=plan.to_wire()
            )
        except Exception:  # the worker is going: the control plane reports the loss
            return
        gone = answer == "no-actor" and not plan.stop and record.members.actors.get(name) == address
        if gone and record.plan is plan and name in plan.members:
            self.drop(record, name, "its rank actor is gone")

    def drop(self, record: Record, name: str, cause: str) -> None:
        """Member ``name`` is gone, whoever saw it go (the control plane, a plan that
        found no actor, a rank stuck in its step): it leaves the run's actors and ready
        ranks, and the run recovers from its loss."""
        record.members.actors.pop(name, None)
        record.members.ready.pop(name, None)
        self.lost(record, [name], cause)

    def lost(self, record: Record, names: list[str], cause: str) -> None:
        """Members ``names`` are gone: recover (survive or form), or park the ranks
        when fewer than ``min_workers`` are left. Losses during one recovery make one
        recovery, with all their causes."""
        plan = record.plan
        if plan is None or plan.stop or not set(names) & set(plan.members):
            return
        survivors = [m for m in plan.members if m not in names and m in record.members.actors]
        now = time.time()
        if record.recovery.pending is None:
            record.recovery.pending = {
                "cause": f"{', '.join(names)}: {cause}",
                "detected_at": now,
                "workers_before": len(plan.members),
                "highest_step": record.highest_step,
                "lost": list(names),
            }
        else:
            record.recovery.pending["cause"] += f"; {', '.join(names)}: {cause}"
            record.recovery.pending["lost"] += list(names)
        self.status.set_health(record, Health.DEGRADED, record.recovery.pending["cause"])
        if len(survivors) < record.options.min_workers:
            self.status.set_state(
                record,
                RunState.STALLED,
                f"{len(survivors)} worker(s) left, min_workers={record.options.min_workers}",
            )
            self.new_plan(record, [], How.FORM)
            return
        self.status.set_state(record, RunState.RECOVERING, record.recovery.pending["cause"])
        self.progress.publish(record, force=True)  # dashboards: the lost tile at once
        prepared = record.gens.prepared.get(plan.gen, set())
        fast = (
            record.options.fast_recovery
            and len(names) == 1
            and prepared >= set(plan.members) - set(names)
            and record.gens.synced.get(plan.gen, set()) >= set(plan.members) - set(names)
        )
        self.new_plan(record, survivors, How.SURVIVE if fast else How.FORM, lost=names[0])

    # ---- reports of a generation

    def on_synced(self, record: Record, r: Report) -> None:
        """A member trains generation ``r.gen`` from ``r.step``: once all do, the run
        is running (unless a recovery is still to be completed by ``resumed``)."""
        record.gens.synced.setdefault(r.gen, set()).add(r.name)
        if SyncedData.of(r).verified:
            record.gens.verified.add(r.gen)
        record.step = max(record.step, r.step)
        plan = record.plan
        if (
            plan is not None
            and r.gen == plan.gen
            and record.gens.synced[r.gen] >= set(plan.members)
        ):
            record.last_advance = time.time()
            if record.recovery.pending is None:
                if record.state is not RunState.RUNNING:
                    self.status.set_state(record, RunState.RUNNING, f"{len(plan.members)} workers")
                self.status.update_health(record)

    def on_prepared(self, record: Record, r: Report) -> None:
        """A member built its survivor groups: a single loss may take the fast path."""
        gen = PreparedData.of(r).prepared_gen
        record.gens.prepared.setdefault(gen, set()).add(r.name)
