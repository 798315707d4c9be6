"""Members that cannot meet their peers: capped re-forms, then the member leaves the run.

A collective or rendezvous that fails with no worker lost makes the coordinator form
the same members again (:mod:`._recoveries`). A member that can never meet its peers
(a host the others cannot reach, a NIC or GPU whose communicator never comes up)
would keep that loop going, with the whole run standing still. So after
:data:`REFORMS_CAP` failed forms at one step, :func:`evict_one` takes out a member
the evidence names: the one its peers saw absent from the failed rendezvous (each
rank marks its arrival in the store before it meets the others, and a failed
rendezvous reports whose marks it did not find), else a joiner that has not trained
yet (the others trained together before it came). With no such evidence (every
member arrived, and none is new) nobody is evicted: a guess would take healthy
workers out one by one, so the members are formed again until the run fails at its
stall threshold, saying why.

An eviction is a loss like any other (a recovery with its cause, the run DEGRADED).
The evicted rank actor is sent a stop plan now and again when the run ends, and the
worker is not admitted again by this run. ``members.evicted``, ``retired`` and
``absent`` (generation -> how often each member was seen absent from its failed
rendezvous) are written through :mod:`._members`.
"""

from __future__ import annotations

from dataclasses import replace

from ft_notebook.train.coordinator import _generations, _members
from ft_notebook.train.coordinator._actions import Decision, Log, SendPlan
from ft_notebook.train.coordinator._book import RunBook
from ft_notebook.train.protocol import Plan, Report
from ft_notebook.train.report_kinds import PeerFailedData

#: Failed forms of the same members at one step before one of them is evicted.
REFORMS_CAP = 3


def on_not_met(book: RunBook, r: Report) -> RunBook:
    """A rank's rendezvous failed: count the members whose arrival it did not see
    (by generation: the coordinator may have moved on when a late report comes)."""
    failed = PeerFailedData.of(r)
    if failed.absent is None:  # not a rendezvous, or the rank could not look
        return book
    return replace(book, members=_members.seen_absent(book.members, failed.plan, failed.absent))


def evict_one(book: RunBook, plan: Plan, failures: int, error: str, d: Decision) -> RunBook | None:
    """The members failed to form ``failures`` times at one step: the book with the
    member the evidence names evicted, or None when none can be (no evidence, or it
    would leave fewer than ``min_workers``)."""
    members = [m for m in plan.members if m in book.members.actors]
    if len(members) < 2 or len(members) - 1 < book.options.min_workers:
        return None
    named = culprit(book, plan, members)
    if named is None:
        return None
    name, why = named
    m = book.members
    address = m.actors[name]
    cause = (
        f"could not meet its peers: {failures} forms of the same {len(plan.members)} "
        f"workers failed at step {book.step} ({why}; last error: {error or 'none given'})"
    )
    d.do(Log("warning", f"run {book.name}: evicting {name}: it {cause}"))
    members_after = _members.evicted(m, name, cause)
    stop = Plan(
        run=book.name,
        gen=plan.gen,
        members=(),
        store=plan.store,
        stop=f"evicted: it {cause}",
        incarnation=book.incarnation,
    )
    d.do(SendPlan(name, address, stop))
    return _generations.lost(replace(book, members=members_after), [name], cause, d)


def culprit(book: RunBook, plan: Plan, members: list[str]) -> tuple[str, str] | None:
    """The member to evict and why it, or None when nothing names one."""
    votes = book.members.absent.get(plan.gen)
    if votes:
        named = [(m, votes.get(m, 0)) for m in members if votes.get(m, 0)]
        if named:
            name, count = max(named, key=lambda mv: (mv[1], members.index(mv[0])))
            return name, f"{count} members did not see it arrive at the rendezvous"
    joiners = [m for m in members if m in book.members.admitting]
    if joiners:
        return joiners[-1], "it joined and had not trained yet; the others had trained"
    return None
