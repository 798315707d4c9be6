"""A run coordinator driven as its scheduler drives it, with no cluster: for tests
and benchmarks of what it decides.

The coordinator is the real one (:class:`~ft_notebook.train.coordinator.RunCoordinator`)
and gets what the scheduler hands it: a kernel's submit, rank reports, the control
plane's news of workers lost, hung and joined, a kernel's cancel, its own ``close``
when the cluster shuts down, and a new run under the same name (``resume=True``).
Only the cluster around it is stubbed, since no worker runs: its calls to the ranks
are answered, the workers listed and the rendezvous store's address made up; its
events go where the configuration sends them (a journal in the data folder). Use it
from a running event loop (``await Drive.started(name)``): the coordinator's
background tasks run on it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from ft_notebook.cluster._control import ControlPlane
from ft_notebook.events import CheckpointCommitted, publish, run_topic
from ft_notebook.train.coordinator import RunCoordinator
from ft_notebook.train.coordinator._book import RunBook
from ft_notebook.train.coordinator._inputs import ProgressDue
from ft_notebook.train.protocol import REPORT_TOPIC, RankOp, Report
from ft_notebook.train.report_kinds import (
    CheckpointData,
    ProgressData,
    ReadyData,
    ReportData,
    ResumedData,
)

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
        self.coordinator = c = RunCoordinator()
        c.link.control = ControlPlane()  # not started: holds and rows only
        c.link.control.add_listener(c.on_membership)
        c.link.call = self._rank_answers  # type: ignore[method-assign]
        c.link.workers = lambda: {w: f"tcp://{w}" for w in WORKERS}  # type: ignore[method-assign]
        c.link.control.rendezvous_store = self._store
        self.step = 0
        self.clock = itertools.count(1)

    @classmethod
    async def started(cls, name: str) -> Drive:
        """A drive whose run trains on every worker, as a submitted run comes to."""
        drive = cls(name)
        await drive._start()
        return drive

    @property
    def book(self) -> RunBook:
        return self.coordinator.runs[self.name]

    async def _rank_answers(self, address: str, op: RankOp, **kwargs: Any) -> Any:
        return {RankOp.START: "started", RankOp.DELIVER: "delivered"}.get(op, "null")

    async def _store(self) -> tuple[str, int]:
        return ("127.0.0.1", 1)

    async def settle(self) -> None:
        """Let the coordinator's background tasks (its calls to the stubs) run out."""
        for _ in range(100):
            await asyncio.sleep(0)
            if not self.coordinator.link.tasks:
                return

    async def _start(self) -> None:
        """Submit the run (or the run resumed under the same name); every rank warms up."""
        self.coordinator.submit(self.name, b"", {"min_workers": 1, "total_steps": 400})
        await self.settle()
        for worker in WORKERS:
            self.report(ReadyData(), member=worker)
        await self.settle()

    def report(self, payload: ReportData, member: str | None = None) -> None:
        """``payload`` as rank 0 (or ``member``) reports it, at the run's step."""
        plan = self.book.plan
        gen = plan.gen if plan is not None else 0
        members = self.book.training
        member = member or (members[0] if members else WORKERS[0])
        when = 1000.0 + next(self.clock)
        report = Report(
            self.name,
            member,
            payload.KIND,
            gen,
            self.step,
            when,
            payload.to_data(),
            self.book.incarnation,
        )
        # as the scheduler's event log hands it on: through the wire format
        self.coordinator.log_event(REPORT_TOPIC, report.to_wire())

    async def do(self, op: str) -> None:
        book, c = self.book, self.coordinator
        members = list(book.training)
        if book.finished and op != "resume":
            return
        if op in ("progress", "quiet-progress") and members:
            self.step += 5
            self.report(
                ProgressData(epoch=self.step // 8, loss=1.0 / self.step, world=len(members))
            )
            if op == "progress":  # the publisher's turn came (once a second); else not yet
                c.feed(self.name, ProgressDue(time.time(), {}, force=True))
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
            gone = [w for w in WORKERS if w not in book.members.actors]
            if gone:
                c.link.control._tell("joined", gone[0], f"tcp://{gone[0]}", "")
                await self.settle()  # the actor's start, on the coordinator's loop
                if self.book.plan is not None:
                    self.report(ReadyData(), member=gone[0])
        elif op == "cancel":
            c.cancel(self.name)
        elif op == "down":
            await c.close()
        elif op == "resume" and book.finished:
            self.step = 0
            await self._start()
        await self.settle()
