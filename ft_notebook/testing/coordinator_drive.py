"""A run coordinator driven as its scheduler drives it, with no cluster: for tests
and benchmarks of what it decides.

The coordinator is the real one (:class:`~ft_notebook.train.coordinator.RunCoordinator`)
and gets what the scheduler hands it: rank reports, the control plane's news of
workers lost, hung and joined, a kernel's cancel, its own ``close`` when the cluster
shuts down, and a new run under the same name (``resume=True``). Only its calls to
the ranks are answered by a stub, since no worker runs; its events go where the
configuration sends them (a journal in the data folder). Call :meth:`Drive.do` from
a running event loop: the coordinator's background tasks run on it.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from ft_notebook.cluster._control import ControlPlane
from ft_notebook.events import CheckpointCommitted, RunState, publish, run_topic
from ft_notebook.train.coordinator import RunCoordinator
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.protocol import REPORT_TOPIC, How, RankOp, Report
from ft_notebook.train.report_kinds import (
    CheckpointData,
    ProgressData,
    ReadyData,
    ReportData,
    ResumedData,
)
from ft_notebook.train.spec import RunOptions

WORKERS = ["cpu0", "cpu1", "cpu2"]

#: What can happen to a run, as the scheduler hands it to the coordinator.
OPS = [
    "progress",
    "quiet-progress",
    "checkpoint",
    "kill",
    "hang",
    "resumed",
    "rejoin",
    "cancel",
    "down",
    "resume",
]


class Drive:
    """A coordinator with one run, and the faults and reports of its ranks."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.coordinator = RunCoordinator()
        self.coordinator.link.control = ControlPlane()  # not started: holds and rows only
        self.coordinator.link.control.add_listener(self.coordinator.members.on_membership)
        self.coordinator.link.call = self._rank_answers  # type: ignore[method-assign]
        self.step = 0
        self.clock = itertools.count(1)
        self.record = self._start()

    async def _rank_answers(self, address: str, op: RankOp, **kwargs: Any) -> Any:
        return {RankOp.START: "started", RankOp.DELIVER: "delivered"}.get(op, "null")

    def _start(self) -> Record:
        """A run (or the run resumed under the same name) training on every worker."""
        record = Record(self.name, b"", RunOptions(min_workers=1, total_steps=400))
        self.coordinator.runs[self.name] = record
        self.coordinator.status.started(record)
        record.members.target_world = len(WORKERS)
        record.members.actors = {w: f"tcp://{w}" for w in WORKERS}
        record.members.ready = {w: 0.0 for w in WORKERS}
        self.coordinator.status.set_state(record, RunState.RUNNING, "3 workers")
        self.coordinator.plans.new_plan(record, list(WORKERS), How.FORM)
        return record

    def report(self, payload: ReportData, member: str | None = None) -> None:
        """``payload`` as rank 0 (or ``member``) reports it, at the run's step."""
        plan = self.record.plan
        assert plan is not None
        member = member or (plan.members[0] if plan.members else WORKERS[0])
        when = 1000.0 + next(self.clock)
        report = Report(
            self.name,
            member,
            payload.KIND,
            plan.gen,
            self.step,
            when,
            payload.to_data(),
            self.record.incarnation,
        )
        # as the scheduler's event log hands it on: through the wire format
        self.coordinator.log_event(REPORT_TOPIC, report.to_wire())

    async def do(self, op: str) -> None:
        record, c = self.record, self.coordinator
        members = list(record.plan.members) if record.plan and not record.plan.stop else []
        if record.finished and op != "resume":
            return
        if op in ("progress", "quiet-progress") and members:
            self.step += 5
            self.report(
                ProgressData(epoch=self.step // 8, loss=1.0 / self.step, world=len(members))
            )
            if op == "progress":  # the publisher's turn came (once a second); else not yet
                c.progress.publish(record, force=True)
        elif op == "checkpoint" and members:
            # the rank's store journals its commit, and the rank reports it
            publish(CheckpointCommitted(self.step, 10), run_topic(self.name), run=self.name)
            self.report(CheckpointData(checkpoint_step=self.step))
        elif op in ("kill", "hang") and members:
            victim = members[-1]
            c.link.control._tell("lost" if op == "kill" else "hung", victim, f"tcp://{victim}", op)
        elif op == "resumed" and members:
            self.report(ResumedData(synced_step=self.step))
        elif op == "rejoin":
            gone = [w for w in WORKERS if w not in record.members.actors]
            if gone:
                c.link.control._tell("joined", gone[0], f"tcp://{gone[0]}", "")
                await asyncio.sleep(0)  # the actor's start, on the coordinator's loop
                if record.plan is not None:
                    self.report(ReadyData(), member=gone[0])
        elif op == "cancel":
            c.cancel(self.name)
        elif op == "down":
            await c.close()
        elif op == "resume" and record.finished:
            self.step = 0
            self.record = self._start()
        await asyncio.sleep(0)
