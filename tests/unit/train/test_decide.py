"""Issue 33: the coordinator's decisions as tables. A run's book and an input go in;
the book and the actions that come out are compared with what the row says. No
cluster, no event loop, no sleeps: ``decide`` is pure (and the last test checks
that it leaves what it was given as it was, over random sequences of inputs)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ft_notebook.events import Health, RunState
from ft_notebook.testing.books import T0, at, report, running
from ft_notebook.train.coordinator._actions import (
    After,
    AskStates,
    EvictWorker,
    ForgetKeys,
    Hold,
    Publish,
    PublishProgress,
    SendPlan,
    StartActor,
)
from ft_notebook.train.coordinator._book import RunBook
from ft_notebook.train.coordinator._inputs import (
    ActorStarted,
    Cancelled,
    ClusterClosing,
    Input,
    Launched,
    PlanAnswered,
    RankStates,
    ReformDue,
    Tick,
    WarmupOver,
    WorkerNews,
)
from ft_notebook.train.coordinator.decide import decide, start
from ft_notebook.train.protocol import How, Phase
from ft_notebook.train.report_kinds import (
    CheckpointData,
    CheckpointFailedData,
    DoneData,
    ErrorData,
    PeerFailedData,
    ProgressData,
    ReadyData,
    ResumedData,
    SyncedData,
)
from ft_notebook.train.spec import RunOptions

pytestmark = pytest.mark.unit

ADDR = {f"cpu{i}": f"tcp://10.0.0.{i}:4000" for i in range(4)}


def _watched() -> RunBook:
    """A running run whose first steps may stand still 20 s before they are a hang."""
    return running(3, first_steps_floor_s=20.0)[0]


def _stood_still(book: RunBook) -> RunBook:
    """The book as it is when its step has not moved for a minute."""
    return at(book, last_advance=T0 - 60)


def _first_of_two_joiners_admitted() -> RunBook:
    """Two workers joined a run of two; the first warm is admitted (a generation with
    a boundary, not yet formed: no member has synced on it), the second still warms."""
    book = running(2)[0]
    for name in ("cpu2", "cpu3"):
        book = decide(book, WorkerNews(T0 + 5, "joined", name, ADDR[name]))[0]
    book = decide(book, report(book, ReadyData(), "cpu2", now=T0 + 7))[0]
    assert book.plan is not None
    assert book.plan.switch_at > 0
    return book


@dataclass
class Row:
    """One line of a table: a book, an input, and what must come out."""

    id: str
    given: Callable[[], RunBook]
    input: Callable[[RunBook], Input]
    state: RunState | None = None
    health: Health | None = None
    members: tuple[str, ...] | None = None  # the plan's, after
    how: How | None = None
    #: Kinds of action, in order, that must be among those taken (others may come between).
    actions: list[type] = field(default_factory=list)
    #: Kinds of action that must not be taken.
    never: list[type] = field(default_factory=list)
    reason: str = ""  # in the book's reason
    check: Callable[[RunBook, tuple[Any, ...]], None] | None = None


def _warm_while_survivors_form(**options: Any) -> RunBook:
    """cpu2 lost at T0+5 (the survivors' generation 2, no rendezvous), back and warm
    at T0+5.3, before the survivors synced on generation 2."""
    book = running(3, **options)[0]
    book = decide(book, _lost("cpu2")(book))[0]
    book = decide(book, WorkerNews(T0 + 5.2, "joined", "cpu2", ADDR["cpu2"]))[0]
    book = decide(book, report(book, ReadyData(), "cpu2", now=T0 + 5.3))[0]
    assert book.plan is not None
    assert (book.plan.gen, book.plan.how) == (2, How.SURVIVE), book.plan
    return book


def _synced(book: RunBook, *members: str, now: float) -> RunBook:
    for name in members:
        payload = SyncedData(world=2, rank=0, how=How.SURVIVE)
        book = decide(book, report(book, payload, name, now=now))[0]
    return book


def _joined_during_recovery() -> RunBook:
    """As :func:`_warm_while_survivors_form`; the survivors synced at T0+5.4, and the
    join's generation 3 followed (with a boundary) before generation 2 committed a step."""
    book = _synced(_warm_while_survivors_form(), "cpu0", "cpu1", now=T0 + 5.4)
    assert book.plan is not None
    assert book.plan.gen == 3, book.plan
    assert book.plan.switch_at > 0, book.plan
    return book


def _lost(name: str, kind: str = "lost") -> Callable[[RunBook], Input]:
    return lambda b: WorkerNews(T0 + 5, kind, name, ADDR[name], f"worker {kind}")


def _no_change(book: RunBook, actions: tuple[Any, ...]) -> None:
    assert actions == ()


ROWS = [
    # ---- workers lost, hung, joined
    Row(
        "a lost member of a prepared generation: the survivors go on without a rendezvous",
        lambda: running(3)[0],
        _lost("cpu2"),
        RunState.RECOVERING,
        Health.DEGRADED,
        ("cpu0", "cpu1"),
        How.SURVIVE,
        [Publish, Publish, PublishProgress, SendPlan, SendPlan],
        reason="cpu2: worker lost",
        check=lambda b, a: (
            assert_that(b.recovery.pending is not None and b.recovery.pending.lost == ("cpu2",)),
            assert_that("cpu2" not in b.members.actors),
        ),
    ),
    Row(
        "a lost member before the survivor groups were built: a new group forms",
        lambda: running(3, prepared=False)[0],
        _lost("cpu2"),
        RunState.RECOVERING,
        Health.DEGRADED,
        ("cpu0", "cpu1"),
        How.FORM,
    ),
    Row(
        "fast recovery turned off: a new group forms",
        lambda: running(3, fast_recovery=False)[0],
        _lost("cpu1"),
        RunState.RECOVERING,
        members=("cpu0", "cpu2"),
        how=How.FORM,
    ),
    Row(
        "a hung member is a loss like a dead one",
        lambda: running(3)[0],
        _lost("cpu1", "hung"),
        RunState.RECOVERING,
        Health.DEGRADED,
        ("cpu0", "cpu2"),
        reason="worker hung",
    ),
    Row(
        "news of a worker at another address (a new process) is not a loss of the run",
        lambda: running(3)[0],
        lambda b: WorkerNews(T0 + 5, "lost", "cpu2", "tcp://10.0.0.9:4000"),
        RunState.RUNNING,
        Health.HEALTHY,
        ("cpu0", "cpu1", "cpu2"),
        check=_no_change,
    ),
    Row(
        "fewer survivors than min_workers: the ranks park and the run stalls",
        lambda: running(3, min_workers=3)[0],
        _lost("cpu0"),
        RunState.STALLED,
        Health.DEGRADED,
        (),
        reason="2 worker(s) left, min_workers=3",
    ),
    Row(
        "a worker that joins gets an actor, and waits for it to warm up",
        lambda: running(3)[0],
        lambda b: WorkerNews(T0 + 5, "joined", "cpu3", ADDR["cpu3"]),
        RunState.RUNNING,
        members=("cpu0", "cpu1", "cpu2"),
        actions=[StartActor],
        never=[SendPlan],
        check=lambda b, a: assert_that(b.members.arrivals == {"cpu3": T0 + 5}),
    ),
    Row(
        "a joiner warm: a new generation with it, at the next step boundary",
        lambda: decide(running(3)[0], WorkerNews(T0 + 5, "joined", "cpu3", ADDR["cpu3"]))[0],
        lambda b: report(b, ReadyData(), "cpu3", now=T0 + 7),
        RunState.RUNNING,
        members=("cpu0", "cpu1", "cpu2", "cpu3"),
        how=How.FORM,
        actions=[SendPlan, SendPlan, SendPlan, SendPlan, PublishProgress],
        check=lambda b, a: assert_that(
            dict(b.members.admitting["cpu3"])
            == {"name": "cpu3", "arrived_at": T0 + 5, "ready_at": T0 + 7, "generation": 2}
            # the members finish the step they are in first (the newest one heard of)
            and b.plan.switch_at == b.highest_step + 1
            and all(x.plan.switch_at == b.highest_step + 1 for x in a if isinstance(x, SendPlan))
        ),
    ),
    Row(
        "a second joiner warm while the first one's generation still forms: no boundary",
        lambda: _first_of_two_joiners_admitted(),
        lambda b: report(b, ReadyData(), "cpu3", now=T0 + 8),
        RunState.RUNNING,
        members=("cpu0", "cpu1", "cpu2", "cpu3"),
        how=How.FORM,
        # a joiner that hears of this plan first skips the forming one, where the others
        # waited for it 30 s (the drills' double kills, replacements 17 ms apart): a
        # plan with no boundary stops the forming, and all four meet in the new one
        check=lambda b, a: assert_that(
            b.plan.switch_at == 0
            and all(x.plan.switch_at == 0 for x in a if isinstance(x, SendPlan))
        ),
    ),
    Row(
        "a plan that found no actor on a member: the member is lost",
        lambda: running(3)[0],
        lambda b: PlanAnswered(T0 + 5, "cpu1", ADDR["cpu1"], 1),
        RunState.RECOVERING,
        members=("cpu0", "cpu2"),
        reason="its rank actor is gone",
    ),
    Row(
        "an answer to an older plan changes nothing",
        lambda: running(3)[0],
        lambda b: PlanAnswered(T0 + 5, "cpu1", ADDR["cpu1"], 0),
        RunState.RUNNING,
        check=_no_change,
    ),
    # ---- reports
    Row(
        "progress moves the step on and keeps a point; publishing waits for its turn",
        lambda: running(3)[0],
        lambda b: report(b, ProgressData(loss=0.5, steps_per_s=4.0, world=3), "cpu0", step=12),
        RunState.RUNNING,
        never=[Publish],
        check=lambda b, a: (
            assert_that(b.step == 12 and b.last_advance == T0 + 1),
            assert_that(b.progress.history[-1]["loss"] == 0.5),
        ),
    ),
    Row(
        "a committed checkpoint shows at once, and the step is at least its step",
        lambda: running(3)[0],
        lambda b: report(b, CheckpointData(checkpoint_step=20), "cpu0", step=20),
        RunState.RUNNING,
        check=lambda b, a: assert_that((b.view.checkpoint_step, b.step) == (20, 20)),
    ),
    Row(
        "a checkpoint that cannot be written: degraded, with the error, and the run goes on",
        lambda: running(3)[0],
        lambda b: report(b, CheckpointFailedData(error="ENOSPC: disk full"), "cpu0", step=4),
        RunState.RUNNING,
        Health.DEGRADED,
        ("cpu0", "cpu1", "cpu2"),
        reason="checkpoints fail: ENOSPC: disk full",
        check=lambda b, a: assert_that(b.view.lagging),
    ),
    Row(
        "a checkpoint written again: healthy again",
        lambda: decide(
            running(3)[0],
            report(running(3)[0], CheckpointFailedData(error="ENOSPC"), "cpu0", step=4),
        )[0],
        lambda b: report(b, CheckpointData(checkpoint_step=6), "cpu0", step=6),
        RunState.RUNNING,
        Health.HEALTHY,
    ),
    Row(
        "rank 0 resumed generation 2: the recovery completes and is published whole",
        lambda: decide(running(3)[0], _lost("cpu2")(running(3)[0]))[0],
        lambda b: report(b, ResumedData(synced_step=0), "cpu0", step=1, now=T0 + 5.25),
        RunState.RUNNING,
        Health.DEGRADED,  # 2 of the 3 workers it began with
        ("cpu0", "cpu1"),
        actions=[Publish, Publish],
        check=lambda b, a: (
            assert_that(b.recovery.pending is None),
            assert_that([r.rto_s for r in b.view.recoveries] == [0.25]),
            assert_that(not b.view.recoveries[0].verified),  # gen 2 never synced verified
        ),
    ),
    Row(
        "a joiner warm while the survivors of a loss go on without a rendezvous: no "
        "plan stops them; it waits for them to train",
        lambda: _warm_while_survivors_form(),
        lambda b: report(b, SyncedData(world=2, rank=0, how=How.SURVIVE), "cpu0", now=T0 + 5.4),
        RunState.RECOVERING,
        members=("cpu0", "cpu1"),
        how=How.SURVIVE,
        never=[SendPlan],
    ),
    Row(
        "the joiner that waited for the survivors, when a second loss parks the run below "
        "min_workers: admitted at once, and the run has enough again",
        lambda: _warm_while_survivors_form(min_workers=2),
        _lost("cpu1"),
        RunState.RECOVERING,
        members=("cpu0", "cpu2"),
        how=How.FORM,
    ),
    Row(
        "the survivors all train: the joiner that was warm is admitted at a step boundary",
        lambda: _synced(_warm_while_survivors_form(), "cpu0", now=T0 + 5.4),
        lambda b: report(b, SyncedData(world=2, rank=1, how=How.SURVIVE), "cpu1", now=T0 + 5.4),
        RunState.RECOVERING,
        members=("cpu0", "cpu1", "cpu2"),
        how=How.FORM,
        actions=[SendPlan, SendPlan, SendPlan, PublishProgress],
        check=lambda b, a: assert_that(
            b.plan.switch_at == b.highest_step + 1 and b.recovery.pending is not None
        ),
    ),
    Row(
        "the survivors' generation commits after a joiner's plan followed it: the "
        "recovery is the survivors' (2 workers, survive), not the join's",
        lambda: _joined_during_recovery(),
        lambda b: report(b, ResumedData(synced_step=0), "cpu0", gen=2, step=1, now=T0 + 5.5),
        RunState.RUNNING,
        members=("cpu0", "cpu1", "cpu2"),  # the join's plan stays the newest
        check=lambda b, a: (
            assert_that(b.recovery.pending is None),
            assert_that([r.generation for r in b.view.recoveries] == [2]),
            assert_that([r.workers_after for r in b.view.recoveries] == [2]),
            assert_that([r.how for r in b.view.recoveries] == [How.SURVIVE]),
            assert_that([r.rto_s for r in b.view.recoveries] == [0.5]),
        ),
    ),
    Row(
        "done: completed, the stop plan to every rank, the cluster let go",
        lambda: running(3)[0],
        lambda b: report(b, DoneData(checkpoint=400, loss=0.1), "cpu0", step=400),
        RunState.COMPLETED,
        Health.HEALTHY,
        (),
        actions=[Publish, PublishProgress, ForgetKeys, SendPlan, SendPlan, SendPlan, Hold],
        check=lambda b, a: assert_that(
            (b.step, b.view.checkpoint_step, b.plan is not None and b.plan.stop, b.spec)
            == (400, 400, "completed", b"")
        ),
    ),
    Row(
        "a rank's error fails the run with its words",
        lambda: running(3)[0],
        lambda b: report(b, ErrorData(error="ValueError: bad batch"), "cpu1"),
        RunState.FAILED,
        members=(),
        reason="cpu1: ValueError: bad batch",
        check=lambda b, a: assert_that(b.errors["cpu1"]["error"] == "ValueError: bad batch"),
    ),
    Row(
        "a late report of an earlier run of the same name is ignored",
        lambda: running(3)[0],
        lambda b: report(b, ErrorData(error="old"), "cpu1", incarnation="inc0"),
        RunState.RUNNING,
        check=_no_change,
    ),
    Row(
        "a report of a run that ended changes nothing",
        lambda: decide(running(3)[0], Cancelled(T0 + 2))[0],
        lambda b: report(b, ProgressData(loss=0.5), "cpu0", step=30),
        RunState.CANCELLED,
        check=_no_change,
    ),
    Row(
        "a failed collective: the loss gets a moment to be told, then the same members form",
        lambda: running(3)[0],
        lambda b: report(b, PeerFailedData(error="reset", plan=1), "cpu0", step=7),
        RunState.RUNNING,
        actions=[After],
        never=[SendPlan],
    ),
    Row(
        "no loss came: the same members form again",
        lambda: running(3)[0],
        lambda b: ReformDue(T0 + 2, 1, 7, "reset"),
        RunState.RUNNING,
        members=("cpu0", "cpu1", "cpu2"),
        how=How.FORM,
        actions=[SendPlan, SendPlan, SendPlan],
        check=lambda b, a: assert_that(
            b.recovery.regrouping is not None and b.recovery.regrouping.failures == 1
        ),
    ),
    # ---- the watchdog
    Row(
        "a step standing still past the threshold: the members are asked where they are",
        lambda: _stood_still(_watched()),
        lambda b: Tick(T0 + 1),
        RunState.RUNNING,
        actions=[PublishProgress, AskStates],
        check=lambda b, a: assert_that(b.asked == 1),
    ),
    Row(
        "asked already: not asked again before they answer",
        lambda: at(_stood_still(_watched()), asked=1),
        lambda b: Tick(T0 + 1),
        RunState.RUNNING,
        never=[AskStates],
    ),
    Row(
        "a step moving: nobody is asked",
        _watched,
        lambda b: Tick(T0 + 1),
        RunState.RUNNING,
        never=[AskStates],
    ),
    Row(
        "one member stuck computing: it is evicted and the others go on",
        lambda: at(_stood_still(_watched()), asked=1),
        lambda b: RankStates(T0 + 1, 1, {"cpu1": {"phase": Phase.COMPUTE, "step": 7}}),
        RunState.RECOVERING,
        Health.DEGRADED,
        ("cpu0", "cpu2"),
        actions=[EvictWorker],
        reason="step not advancing",
        check=lambda b, a: assert_that(b.asked is None and b.last_advance == T0 + 1),
    ),
    Row(
        "every member stuck, but not for long: wait",
        lambda: at(_watched(), asked=1, last_advance=T0 - 30),
        lambda b: RankStates(
            T0 + 1, 1, {n: {"phase": Phase.COMPUTE, "step": 7} for n in ("cpu0", "cpu1", "cpu2")}
        ),
        RunState.RUNNING,
        never=[EvictWorker],
    ),
    Row(
        "every member stuck for three thresholds: the run fails and says where",
        lambda: at(_watched(), asked=1, last_advance=T0 - 60),
        lambda b: RankStates(
            T0 + 1, 1, {n: {"phase": Phase.COMPUTE, "step": 7} for n in ("cpu0", "cpu1", "cpu2")}
        ),
        RunState.FAILED,
        members=(),
        reason="computing step 7",
    ),
    # ---- the kernel, the cluster
    Row(
        "cancelled by the user",
        lambda: running(3)[0],
        lambda b: Cancelled(T0 + 3),
        RunState.CANCELLED,
        members=(),
        reason="cancelled by the user",
        actions=[Publish, PublishProgress, SendPlan, Hold],
    ),
    Row(
        "the cluster closing ends the run",
        lambda: running(3)[0],
        lambda b: ClusterClosing(T0 + 3),
        RunState.CANCELLED,
        reason="its cluster shut down",
    ),
    Row(
        "a run that ended stays as it ended",
        lambda: decide(running(3)[0], Cancelled(T0 + 2))[0],
        lambda b: ClusterClosing(T0 + 3),
        RunState.CANCELLED,
        reason="cancelled by the user",
        check=_no_change,
    ),
]


def assert_that(condition: bool) -> None:
    assert condition


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_decisions(row: Row) -> None:
    book = row.given()
    event = row.input(book)
    before = copy.deepcopy(book)
    after, actions = decide(book, event)
    assert book == before, "decide changed the book it was given"
    if row.state is not None:
        assert after.state is row.state
    if row.health is not None:
        assert after.health is row.health
    if row.members is not None:
        assert after.training == row.members
    if row.how is not None:
        assert after.plan is not None
        assert after.plan.how is row.how
    kinds = iter(type(a) for a in actions)
    assert all(any(k is want for k in kinds) for want in row.actions), (
        f"wanted {[k.__name__ for k in row.actions]} in order, took "
        f"{[type(a).__name__ for a in actions]}"
    )
    assert not [a for a in actions if type(a) in row.never]
    assert row.reason in after.reason
    if row.check is not None:
        row.check(after, actions)


# ---- the launch and the warm-up


def _launched(n: int, **options: Any) -> RunBook:
    opts = RunOptions(**{"min_workers": 1, "total_steps": 400, **options})
    book, _ = start("r", b"spec", opts, T0, incarnation="inc1")
    workers = tuple((f"cpu{i}", ADDR[f"cpu{i}"]) for i in range(n))
    return decide(book, Launched(T0, ("h", 1), workers))[0]


def test_a_submitted_run_is_told_holds_its_cluster_and_launches() -> None:
    book, actions = start("r", b"spec", RunOptions(total_steps=9), T0, cluster="c", scheduler="s")
    assert (book.state, book.health, book.view.cluster, book.view.total_steps) == (
        RunState.PENDING,
        Health.HEALTHY,
        "c",
        9,
    )
    assert [type(a).__name__ for a in actions] == ["Publish", "Hold", "Launch"]


def test_launched_an_actor_per_worker_up_to_max_workers_and_a_warm_up_deadline() -> None:
    opts = RunOptions(min_workers=1, max_workers=2, warmup_timeout_s=30.0)
    book, _ = start("r", b"spec", opts, T0)
    workers = tuple((f"cpu{i}", ADDR[f"cpu{i}"]) for i in range(3))
    book, actions = decide(book, Launched(T0, ("h", 1), workers))
    assert dict(book.members.actors) == {"cpu0": ADDR["cpu0"], "cpu1": ADDR["cpu1"]}
    assert book.members.target_world == 2
    assert book.store == ("h", 1)
    assert [a.name for a in actions if isinstance(a, StartActor)] == ["cpu0", "cpu1"]
    [timer] = [a for a in actions if isinstance(a, After)]
    assert timer.delay_s == 30.0
    assert isinstance(timer.input, WarmupOver)


def test_the_first_generation_forms_when_every_actor_is_warm() -> None:
    book = _launched(2)
    book, actions = decide(book, report(book, ReadyData(), "cpu0"))
    assert book.plan is None
    assert not [a for a in actions if isinstance(a, SendPlan)]
    book, actions = decide(book, report(book, ReadyData(), "cpu1"))
    assert book.training == ("cpu0", "cpu1")
    assert book.state is RunState.RUNNING
    assert [a.name for a in actions if isinstance(a, SendPlan)] == ["cpu0", "cpu1"]


def test_too_few_warm_wait_for_workers_that_join_during_the_warm_up() -> None:
    """A cluster just started registers its workers one by one: the run saw 2 of the 3
    that ``min_workers=3`` needs and failed at once (the README's robust example, 1 run
    in 4). It waits for the third until the warm-up is over."""
    book = _launched(2, min_workers=3)
    for worker in ("cpu0", "cpu1"):
        book, _ = decide(book, report(book, ReadyData(), worker))
    assert (book.state, book.plan) == (RunState.PENDING, None)
    book, actions = decide(book, WorkerNews(T0 + 2, "joined", "cpu2", ADDR["cpu2"]))
    assert [a.name for a in actions if isinstance(a, StartActor)] == ["cpu2"]
    book, _ = decide(book, report(book, ReadyData(), "cpu2", now=T0 + 3))
    assert book.training == ("cpu0", "cpu1", "cpu2")
    assert book.state is RunState.RUNNING
    assert (book.members.target_world, dict(book.members.arrivals)) == (3, {})


def test_an_actor_that_could_not_start_leaves_the_warm_up_to_the_others() -> None:
    book = _launched(2)
    book, _ = decide(book, report(book, ReadyData(), "cpu0"))
    book, _ = decide(book, ActorStarted(T0 + 1, "cpu1", ADDR["cpu1"], error="no handler"))
    assert book.training == ("cpu0",)


def test_too_few_warm_when_the_warm_up_is_over_fails_the_run_saying_how_few() -> None:
    book = _launched(3, min_workers=2)
    book, _ = decide(book, report(book, ReadyData(), "cpu0"))
    book, _ = decide(book, WarmupOver(T0 + 60))
    assert book.state is RunState.FAILED
    assert "1 worker(s) finished warming up in time, min_workers=2" in book.reason


def test_an_actor_started_after_its_run_ended_is_sent_the_stop_plan() -> None:
    """A rank started for a worker that joined just before its run ended: the stop
    plan sent at the end can reach the worker before the actor exists, and an actor
    never stopped keeps its model and data, drawing beside the next run's ranks."""
    book, _ = running(2)
    book, _ = decide(book, WorkerNews(T0 + 1, "joined", "cpu3", ADDR["cpu3"]))
    book, _ = decide(book, Cancelled(T0 + 2))
    book, actions = decide(book, ActorStarted(T0 + 3, "cpu3", ADDR["cpu3"]))
    assert [(a.address, a.plan.stop) for a in actions if isinstance(a, SendPlan)] == [
        (ADDR["cpu3"], "cancelled")
    ]


def test_a_resumed_run_says_where_it_resumed_from() -> None:
    book = _launched(1)
    book, _ = decide(book, report(book, ReadyData(), "cpu0", step=80))
    assert book.members.resumed_from == 80


# ---- decide is pure, over any sequence

_INPUTS = st.sampled_from(
    [
        "progress",
        "checkpoint",
        "lost",
        "hung",
        "joined",
        "ready",
        "resumed",
        "peer-failed",
        "reform",
        "tick",
        "states",
        "cancel",
        "closing",
        "done",
    ]
)


def _input(book: RunBook, what: str, t: float) -> Input:
    members = book.training or ("cpu0",)
    last = members[-1]
    step = book.step + 3
    return {
        "progress": lambda: report(book, ProgressData(loss=1 / step), members[0], step=step, now=t),
        "checkpoint": lambda: report(book, CheckpointData(checkpoint_step=book.step), members[0]),
        "lost": lambda: WorkerNews(t, "lost", last, ADDR.get(last, ""), "gone"),
        "hung": lambda: WorkerNews(t, "hung", last, ADDR.get(last, ""), "hung"),
        "joined": lambda: WorkerNews(t, "joined", "cpu3", ADDR["cpu3"]),
        "ready": lambda: report(book, ReadyData(), "cpu3", now=t),
        "resumed": lambda: report(book, ResumedData(synced_step=book.step), members[0], now=t),
        "peer-failed": lambda: report(book, PeerFailedData(plan=1, absent=(last,)), members[0]),
        "reform": lambda: ReformDue(t, book.plan.gen if book.plan else 0, book.step, "x"),
        "tick": lambda: Tick(t),
        "states": lambda: RankStates(t, book.asked or 0, {last: {"phase": Phase.COMPUTE}}),
        "cancel": lambda: Cancelled(t),
        "closing": lambda: ClusterClosing(t),
        "done": lambda: report(book, DoneData(checkpoint=book.step), members[0], now=t),
    }[what]()


@settings(max_examples=60, deadline=None)
@given(st.lists(_INPUTS, max_size=40))
def test_decide_changes_nothing_it_is_given_and_keeps_its_view_with_its_facts(
    whats: list[str],
) -> None:
    book, _ = running(3)
    for i, what in enumerate(whats):
        event = _input(book, what, T0 + 2 + i * 7)
        before = copy.deepcopy(book)
        after, _ = decide(book, event)
        assert book == before
        assert after.view.state is after.state  # the book's state is its view's
        if after.finished:
            assert after.plan is not None
            assert after.plan.stop
            assert after.finished_at is not None
        if after.plan is not None and not after.plan.stop:
            assert set(after.plan.members) <= set(after.members.seen)
        book = after
