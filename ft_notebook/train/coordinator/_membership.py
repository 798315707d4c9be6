"""Which workers have rank actors of a run, and how they get one.

:class:`Membership` keeps ``record.members`` (``actors``, ``ready``, ``seen``,
``arrivals``, ``admitting``): the first start of a run (an actor per worker, warm-up,
the first generation), actors started for workers that join later, the control
plane's news of workers lost, hung and joined, and admitting joiners, once they are
warm, into a new generation (at the next step boundary). ``record.recovery.joins`` is
completed when a joiner first trains (:mod:`._recoveries`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from ft_notebook.cluster.plugins import name_key
from ft_notebook.events import RunState
from ft_notebook.train.coordinator._end import RunEnd
from ft_notebook.train.coordinator._generations import Generations
from ft_notebook.train.coordinator._link import SchedulerLink
from ft_notebook.train.coordinator._publisher import ProgressPublisher
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.coordinator._status import RunStatus
from ft_notebook.train.protocol import How, RankOp, Report

logger = logging.getLogger("ft_notebook.train.coordinator._plugin")


class Membership:
    """Rank actors: started, warmed up, lost, and admitted to a generation."""

    def __init__(
        self,
        runs: dict[str, Record],
        link: SchedulerLink,
        status: RunStatus,
        plans: Generations,
        progress: ProgressPublisher,
        end: RunEnd,
    ) -> None:
        self.runs = runs
        self.link = link
        self.status = status
        self.plans = plans
        self.progress = progress
        self.end = end

    # ---- the first generation

    async def launch(self, record: Record) -> None:
        """Start the run; one that cannot start fails, saying why."""
        try:
            await self._start_run(record)
        except Exception as e:
            logger.exception("could not start run %s", record.name)
            if not record.finished:
                self.end.finish(record, RunState.FAILED, f"the run could not start: {e}")

    async def _start_run(self, record: Record) -> None:
        self.plans.store_address = await self.link.control.rendezvous_store()
        workers = list(self.link.workers().items())
        limit = record.options.max_workers or len(workers)
        chosen = workers[:limit]
        record.members.target_world = len(chosen)
        await asyncio.gather(*(self.start_actor(record, n, a, first=True) for n, a in chosen))
        deadline = time.time() + record.options.warmup_timeout_s
        while not record.finished and time.time() < deadline:
            if record.members.ready.keys() >= set(record.members.actors):
                break
            await asyncio.sleep(0.02)
        if record.finished:
            return
        ready = [n for n in record.members.actors if n in record.members.ready]
        if len(ready) < max(1, record.options.min_workers):
            self.end.finish(
                record,
                RunState.FAILED,
                f"{len(ready)} worker(s) finished warming up in time, "
                f"min_workers={record.options.min_workers}",
            )
            return
        self.status.set_state(record, RunState.RUNNING, f"{len(ready)} workers")
        self.plans.new_plan(record, ready, How.FORM)

    async def start_actor(self, record: Record, name: str, address: str, first: bool) -> None:
        record.members.actors[name] = address
        record.members.seen.add(name)
        try:
            answer = await self.link.call(
                address,
                RankOp.START,
                spec=record.spec,
                run=record.name,
                name=name,
                first=first,
                incarnation=record.incarnation,
            )
            if answer not in ("started", "running"):  # None: a worker without the handler
                raise RuntimeError(f"{RankOp.START.value} answered {answer!r}")
        except Exception as e:
            if record.members.actors.get(name) == address:
                record.members.actors.pop(name, None)
            logger.warning("could not start a rank of %s on %s: %s", record.name, name, e)
            return
        if record.finished and record.plan is not None:
            # the run ended while this rank started: its stop plan may have reached the
            # worker before the actor existed ("no-actor"), and an actor never stopped
            # keeps its model and data, and draws beside the next run's ranks
            await self.plans.deliver(record, name, address, record.plan)

    # ---- workers coming and going

    def on_membership(self, kind: str, name: str, address: str, cause: str) -> None:
        """The control plane's news of worker ``name``: ``lost``, ``hung`` or ``joined``."""
        for record in list(self.runs.values()):
            if record.finished:
                continue
            if kind in ("lost", "hung"):
                if record.members.actors.get(name) == address:
                    self.plans.drop(record, name, cause or f"worker {kind}")
            elif (
                kind == "joined"
                and name not in record.members.actors
                and name not in record.members.evicted
            ):
                limit = record.options.max_workers
                if limit is None or len(record.members.actors) < limit:
                    record.members.arrivals[name] = time.time()
                    self.link.spawn(self.start_actor(record, name, address, first=False))

    def on_ready(self, record: Record, r: Report) -> None:
        """A rank warmed up (at ``r.step``: the checkpoint it resumed from, if any)."""
        record.members.ready[r.name] = r.time
        if r.step > 0 and record.plan is None:
            record.members.resumed_from = max(record.members.resumed_from or 0, r.step)
        if record.plan is not None:
            self.admit(record)

    def admit(self, record: Record) -> None:
        """Ready workers not in the generation join it (at the next step boundary)."""
        plan = record.plan
        if plan is None or plan.stop or record.finished:
            return
        waiting = [
            n for n in record.members.actors if n in record.members.ready and n not in plan.members
        ]
        if not waiting:
            return
        members = sorted(
            [m for m in plan.members if m in record.members.actors] + waiting, key=name_key
        )
        if len(members) < record.options.min_workers:
            return
        if record.state is RunState.STALLED:
            self.status.set_state(record, RunState.RECOVERING, f"{len(members)} workers back")
        plan = self.plans.new_plan(record, members, How.FORM)
        self.progress.publish(record, force=True)
        for name in waiting:
            record.members.admitting[name] = {
                "name": name,
                "arrived_at": record.members.arrivals.pop(name, time.time()),
                "ready_at": record.members.ready.get(name, time.time()),
                "generation": plan.gen,
            }
