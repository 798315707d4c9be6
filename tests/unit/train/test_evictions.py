"""A member that can never meet its peers: the coordinator re-forms the same members a
capped number of times, then evicts the likeliest culprit and goes on without it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ft_notebook.cluster._control import ControlPlane
from ft_notebook.events import Health, RunState
from ft_notebook.train.coordinator._evictions import REFORMS_CAP
from ft_notebook.train.coordinator._plugin import RunCoordinator
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.protocol import How, Plan, RankOp, Report
from ft_notebook.train.spec import RunOptions

MEMBERS = ["0", "1", "2"]


def _coordinator(min_workers: int = 1) -> tuple[RunCoordinator, Record]:
    coordinator = RunCoordinator()
    record = Record("r", b"", RunOptions(first_steps_floor_s=60.0, min_workers=min_workers))
    coordinator.link.control = ControlPlane()  # not started: holds and status rows only
    coordinator.runs["r"] = record
    # nothing listens there: plans sent to them fail, as for a worker going away
    record.members.actors = {m: "tcp://127.0.0.1:9" for m in MEMBERS}
    return coordinator, record


async def _fail_rendezvous(
    coordinator: RunCoordinator, record: Record, absent: dict[str, list[str]] | None
) -> None:
    """Every member reports its rendezvous failed (``absent``: who each did not see);
    returns once the coordinator has made its next plan."""
    plan = record.plan
    assert plan is not None
    for name in plan.members:
        data: dict[str, object] = {"error": "RendezvousTimeout: did not complete", "plan": plan.gen}
        if absent is not None:  # a tuple: what the scheduler's event log (msgpack) hands on
            data["absent"] = tuple(absent.get(name, []))
        report = Report("r", name, "peer-failed", plan.gen, 7, 0, data)
        coordinator.reports.on_report(record, report)
    deadline = time.monotonic() + 10
    while record.plan is plan and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert record.plan is not plan, "no new plan after a failed rendezvous"


def _run(coordinator: RunCoordinator, record: Record, absent: dict[str, list[str]] | None) -> int:
    """Fail the rendezvous until a member is evicted; how many forms failed."""

    async def scenario() -> int:
        coordinator.status.set_state(record, RunState.RUNNING, "3 workers")
        coordinator.plans.new_plan(record, MEMBERS, How.FORM)
        failed = 0
        while not record.members.evicted and failed < 10:
            await _fail_rendezvous(coordinator, record, absent)
            failed += 1
        return failed

    return asyncio.run(scenario())


def test_the_member_its_peers_never_saw_arrive_is_evicted_after_the_cap() -> None:
    coordinator, record = _coordinator()
    # "1" is isolated: nobody, itself included, finds its arrival mark
    failed = _run(coordinator, record, {m: ["1"] for m in MEMBERS})
    assert failed == REFORMS_CAP
    assert list(record.members.evicted) == ["1"]
    assert "3 members did not see it arrive" in record.members.evicted["1"]
    assert "RendezvousTimeout" in record.members.evicted["1"]
    assert record.plan is not None
    assert record.plan.members == ("0", "2")
    assert "1" not in record.members.actors
    # the eviction is a loss: recovering, degraded, the cause on the pending recovery
    assert record.state is RunState.RECOVERING
    assert record.health is Health.DEGRADED
    assert record.recovery.pending is not None
    assert record.recovery.pending["lost"] == ["1"]
    assert record.info()["evicted"] == record.members.evicted
    # and the worker is not admitted again by this run, even when it registers anew
    coordinator.members.on_membership("joined", "1", "tcp://127.0.0.1:10", "")
    assert "1" not in record.members.actors
    assert "1" not in record.members.arrivals


def test_without_absences_a_joiner_that_never_trained_goes_first() -> None:
    coordinator, record = _coordinator()
    record.members.admitting["0"] = {"name": "0", "generation": 1}  # joined, not trained yet
    record.members.arrivals["0"] = 1.0
    _run(coordinator, record, None)
    assert list(record.members.evicted) == ["0"]
    assert "joined and had not trained yet" in record.members.evicted["0"]
    # not a join: it must not be completed as one when the others train
    assert "0" not in record.members.admitting
    assert "0" not in record.members.arrivals


def test_with_every_member_seen_and_none_new_nobody_is_evicted() -> None:
    """No evidence names a member (a broken interconnect looks like this): evicting
    one would be a guess, and the next guess would take another healthy worker."""
    coordinator, record = _coordinator()

    async def scenario() -> None:
        coordinator.status.set_state(record, RunState.RUNNING, "3 workers")
        coordinator.plans.new_plan(record, MEMBERS, How.FORM)
        for _ in range(2 * REFORMS_CAP):
            await _fail_rendezvous(coordinator, record, {m: [] for m in MEMBERS})

    asyncio.run(scenario())
    assert record.members.evicted == {}
    assert record.plan is not None
    assert record.plan.members == tuple(MEMBERS)


def test_the_evicted_rank_is_told_to_stop_now_and_again_when_the_run_ends() -> None:
    coordinator, record = _coordinator()
    record.members.actors = {m: f"tcp://w{m}" for m in MEMBERS}
    stops: list[tuple[str, str, str]] = []

    async def call(address: str, op: RankOp, **kwargs: Any) -> Any:
        if op is RankOp.DELIVER:
            plan = Plan.from_wire(kwargs["plan"])
            if plan.stop:
                stops.append((address, plan.stop.split(":")[0], plan.incarnation))
        return "delivered"

    coordinator.link.call = call  # type: ignore[method-assign]

    async def scenario() -> None:
        coordinator.status.set_state(record, RunState.RUNNING, "3 workers")
        coordinator.plans.new_plan(record, MEMBERS, How.FORM)
        while not record.members.evicted:
            await _fail_rendezvous(coordinator, record, {m: ["1"] for m in MEMBERS})
        await asyncio.sleep(0.05)  # the stop plan's send
        coordinator.end.finish(record, RunState.COMPLETED, "256 steps")
        await asyncio.sleep(0.05)

    asyncio.run(scenario())
    mine = record.incarnation
    assert ("tcp://w1", "evicted", mine) in stops
    assert sorted(a for a, why, _ in stops if why == "completed") == [
        "tcp://w0",
        "tcp://w1",  # evicted, but told again: its own stop plan may have been lost
        "tcp://w2",
    ]


def test_no_eviction_below_min_workers() -> None:
    """Evicting would leave fewer than min_workers: the members are formed again."""
    coordinator, record = _coordinator(min_workers=3)

    async def scenario() -> None:
        coordinator.status.set_state(record, RunState.RUNNING, "3 workers")
        coordinator.plans.new_plan(record, MEMBERS, How.FORM)
        for _ in range(REFORMS_CAP + 2):
            await _fail_rendezvous(coordinator, record, {m: ["1"] for m in MEMBERS})

    asyncio.run(scenario())
    assert record.members.evicted == {}
    assert record.plan is not None
    assert record.plan.members == tuple(MEMBERS)
    assert record.recovery.regrouping is not None
    assert record.recovery.regrouping["failures"] == REFORMS_CAP + 2
