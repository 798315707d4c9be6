"""A member that can never meet its peers: the coordinator re-forms the same members a
capped number of times, then evicts the likeliest culprit and goes on without it.
Driven through the coordinator's pure decisions (no cluster, no event loop)."""

from __future__ import annotations

from dataclasses import replace

from ft_notebook.events import Health, RunState
from ft_notebook.testing.books import T0, report, running
from ft_notebook.train.coordinator._actions import After, SendPlan
from ft_notebook.train.coordinator._book import RunBook, info
from ft_notebook.train.coordinator._evictions import REFORMS_CAP
from ft_notebook.train.coordinator._inputs import Cancelled, ReformDue, WorkerNews
from ft_notebook.train.coordinator.decide import decide
from ft_notebook.train.report_kinds import PeerFailedData

MEMBERS = ["cpu0", "cpu1", "cpu2"]
SENT: list[SendPlan] = []


def _book(min_workers: int = 1) -> RunBook:
    return running(3, first_steps_floor_s=60.0, min_workers=min_workers)[0]


def _fail_rendezvous(book: RunBook, absent: dict[str, list[str]] | None) -> RunBook:
    """Every member reports its rendezvous failed (``absent``: who each did not see),
    and the grace for news of a loss passes; returns the book with the next plan."""
    plan = book.plan
    assert plan is not None
    timers: list[ReformDue] = []
    for name in plan.members:
        seen = tuple(absent.get(name, [])) if absent is not None else None
        failed = PeerFailedData(
            error="RendezvousTimeout: did not complete", plan=plan.gen, absent=seen
        )
        book, actions = decide(book, report(book, failed, name, step=7))
        timers += [a.input for a in actions if isinstance(a, After)]  # type: ignore[misc]
    for due in timers:  # each report's timer fires; the first one re-forms
        book, actions = decide(book, replace(due, now=T0 + 5))
        SENT.extend(a for a in actions if isinstance(a, SendPlan))
    assert book.plan is not plan, "no new plan after a failed rendezvous"
    return book


def _run(book: RunBook, absent: dict[str, list[str]] | None) -> tuple[RunBook, int]:
    """Fail the rendezvous until a member is evicted; how many forms failed."""
    failed = 0
    while not book.members.evicted and failed < 10:
        book = _fail_rendezvous(book, absent)
        failed += 1
    return book, failed


def test_the_member_its_peers_never_saw_arrive_is_evicted_after_the_cap() -> None:
    # "cpu1" is isolated: nobody, itself included, finds its arrival mark
    book, failed = _run(_book(), {m: ["cpu1"] for m in MEMBERS})
    assert failed == REFORMS_CAP
    assert list(book.members.evicted) == ["cpu1"]
    assert "3 members did not see it arrive" in book.members.evicted["cpu1"]
    assert "RendezvousTimeout" in book.members.evicted["cpu1"]
    assert book.training == ("cpu0", "cpu2")
    assert "cpu1" not in book.members.actors
    # the eviction is a loss: recovering, degraded, the cause on the pending recovery
    assert book.state is RunState.RECOVERING
    assert book.health is Health.DEGRADED
    assert book.recovery.pending is not None
    assert book.recovery.pending.lost == ("cpu1",)
    assert info(book)["evicted"] == dict(book.members.evicted)
    # and the worker is not admitted again by this run, even when it registers anew
    book, _ = decide(book, WorkerNews(T0 + 9, "joined", "cpu1", "tcp://10.0.0.1:4001"))
    assert "cpu1" not in book.members.actors
    assert "cpu1" not in book.members.arrivals


def test_without_absences_a_joiner_that_never_trained_goes_first() -> None:
    book = _book()
    joining = {"name": "cpu0", "generation": 1, "arrived_at": T0, "ready_at": T0}
    book = replace(
        book,
        members=replace(book.members, admitting={"cpu0": joining}, arrivals={"cpu0": T0}),
    )  # joined, not trained yet
    book, _ = _run(book, None)
    assert list(book.members.evicted) == ["cpu0"]
    assert "joined and had not trained yet" in book.members.evicted["cpu0"]
    # not a join: it must not be completed as one when the others train
    assert "cpu0" not in book.members.admitting
    assert "cpu0" not in book.members.arrivals


def test_with_every_member_seen_and_none_new_nobody_is_evicted() -> None:
    """No evidence names a member (a broken interconnect looks like this): evicting
    one would be a guess, and the next guess would take another healthy worker."""
    book = _book()
    for _ in range(2 * REFORMS_CAP):
        book = _fail_rendezvous(book, {m: [] for m in MEMBERS})
    assert book.members.evicted == {}
    assert book.training == tuple(MEMBERS)


def test_the_evicted_rank_is_told_to_stop_now_and_again_when_the_run_ends() -> None:
    SENT.clear()
    book, _ = _run(_book(), {m: ["cpu1"] for m in MEMBERS})
    book, actions = decide(book, Cancelled(T0 + 20))
    SENT.extend(a for a in actions if isinstance(a, SendPlan))
    stops = [(a.name, a.plan.stop.split(":")[0], a.plan.incarnation) for a in SENT if a.plan.stop]
    assert ("cpu1", "evicted", book.incarnation) in stops
    assert sorted(name for name, why, _ in stops if why == "cancelled") == [
        "cpu0",
        "cpu1",  # evicted, but told again: its own stop plan may have been lost
        "cpu2",
    ]


def test_no_eviction_below_min_workers() -> None:
    """Evicting would leave fewer than min_workers: the members are formed again."""
    book = _book(min_workers=3)
    for _ in range(REFORMS_CAP + 2):
        book = _fail_rendezvous(book, {m: ["cpu1"] for m in MEMBERS})
    assert book.members.evicted == {}
    assert book.training == tuple(MEMBERS)
    assert book.recovery.regrouping is not None
    assert book.recovery.regrouping.failures == REFORMS_CAP + 2


def test_run_info_says_the_fast_path_is_ready_only_when_every_member_prepared() -> None:
    """``fast_path_ready`` is the recovery's own rule (the chaos test waits for it
    before its kill): one member short of its survivor groups, and it is False."""
    book = running(3)[0]
    assert info(book)["fast_path_ready"] is True
    gens = replace(book.gens, prepared={1: frozenset({"cpu0", "cpu1"})})
    assert info(replace(book, gens=gens))["fast_path_ready"] is False
