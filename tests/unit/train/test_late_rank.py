"""A rank started for a worker that joined just before its run ended must be stopped
when its start completes: the stop plan sent at the end can reach the worker before
the actor exists, and an actor never stopped keeps its model and data for the life of
the worker, building and drawing beside the next run's ranks (issue 17)."""

from __future__ import annotations

import asyncio
from typing import Any

from ft_notebook.cluster._control import ControlPlane
from ft_notebook.events import RunState
from ft_notebook.train.coordinator._plugin import RunCoordinator
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.protocol import How, Plan, RankOp
from ft_notebook.train.spec import RunOptions


def test_a_rank_that_starts_after_its_run_ended_is_sent_the_stop_plan() -> None:
    coordinator, record = RunCoordinator(), Record("r", b"spec", RunOptions())
    coordinator.link.control = ControlPlane()  # not started: holds and status rows only
    coordinator.runs["r"] = record
    calls: list[tuple[str, Any]] = []
    started = asyncio.Event()

    async def call(address: str, op: RankOp, **kwargs: Any) -> Any:
        if op is RankOp.START:
            await started.wait()  # the worker is slow to start the actor
            calls.append(("start", kwargs["name"]))
            return "started"
        calls.append(("deliver", Plan.from_wire(kwargs["plan"])))
        return "delivered"

    coordinator.link.call = call  # type: ignore[method-assign]

    async def scenario() -> None:
        coordinator.status.set_state(record, RunState.RUNNING, "1 worker")
        coordinator.plans.new_plan(record, [], How.FORM)
        late = asyncio.ensure_future(
            coordinator.members.start_actor(record, "2", "tcp://w2", False)
        )
        await asyncio.sleep(0)
        coordinator.end.finish(record, RunState.COMPLETED, "256 steps")
        started.set()
        await late

    asyncio.run(scenario())
    after_start = calls[calls.index(("start", "2")) + 1 :]
    stops = [plan.stop for kind, plan in after_start if kind == "deliver"]
    assert stops == ["completed"], calls
