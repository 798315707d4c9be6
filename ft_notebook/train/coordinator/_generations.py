"""Generations: which workers train together, and how their group is made.

The functions here are the one writer of ``RunBook.plan`` and ``RunBook.gens`` (the
world sizes, and the per-generation reports ``synced``, ``verified`` and
``prepared`` that decide how the next loss is recovered), and decide the sends of
each new plan, the rendezvous keys of retired groups to forget, and what a loss
does to the run (it opens ``recovery.pending``).

Recovery (see :mod:`ft_notebook.train.protocol`): a single lost rank of a generation
whose survivor groups are ready takes the fast path
(:attr:`~ft_notebook.train.protocol.How.SURVIVE`: no rendezvous); anything else, or the
fast path turned off, forms a new group (:attr:`~ft_notebook.train.protocol.How.FORM`).
Fewer than ``min_workers`` survivors park the ranks (STALLED) until workers come back.
"""

from __future__ import annotations

from dataclasses import replace

from ft_notebook.events import Health, RunState
from ft_notebook.train.coordinator import _members, _pending, _status
from ft_notebook.train.coordinator._actions import Decision, ForgetKeys, PublishProgress, SendPlan
from ft_notebook.train.coordinator._book import RunBook, put
from ft_notebook.train.coordinator._inputs import PlanAnswered
from ft_notebook.train.protocol import How, Plan, Report, generation_prefix
from ft_notebook.train.report_kinds import PreparedData, SyncedData


def new_plan(
    book: RunBook,
    members: list[str] | tuple[str, ...],
    how: How,
    d: Decision,
    lost: str | None = None,
    stop: str = "",
    switch_at: int = 0,
) -> RunBook:
    """The run's next generation, sent to every rank actor. No members: the ranks
    park; ``stop``: they stop for good (evicted actors are told too, in case their
    own stop plan was lost); ``switch_at``: see :attr:`Plan.switch_at`."""
    old = book.plan
    parts = max(book.gens.parts, len(members))
    plan = Plan(
        run=book.name,
        gen=(old.gen if old is not None else 0) + 1,
        members=tuple(members),
        store=book.store,
        how=how,
        base=old.gen if old is not None and how is How.SURVIVE else None,
        lost=lost,
        stop=stop,
        committed=book.highest_step,
        incarnation=book.incarnation,
        parts=parts,
        switch_at=switch_at,
    )
    world = book.gens.world if stop else len(plan.members)
    book = replace(book, plan=plan, gens=replace(book.gens, parts=parts, world=world))
    _forget_retired(book, plan, d)
    told = dict(book.members.actors)
    if plan.stop:
        told.update(book.members.retired)
    for name, address in told.items():
        d.do(SendPlan(name, address, plan))
    return book


def _forget_retired(book: RunBook, plan: Plan, d: Decision) -> None:
    """Forget the rendezvous keys of groups that can never be used again: those of
    generation gen-2 and older (gen-1's survivor groups may still be switched to,
    and an NCCL group reads its keys at its first collective), or all of them
    once the run stops."""
    if plan.stop:
        d.do(ForgetKeys(generation_prefix(book.name, book.incarnation)))
    elif plan.gen > 2:
        d.do(ForgetKeys(generation_prefix(book.name, book.incarnation, plan.gen - 2)))


def on_plan_answered(book: RunBook, news: PlanAnswered, d: Decision) -> RunBook:
    """A plan found no actor of the run on a member's worker: that member is lost."""
    plan = book.plan
    if (
        plan is None
        or plan.stop
        or plan.gen != news.gen
        or news.name not in plan.members
        or book.members.actors.get(news.name) != news.address
    ):
        return book
    return drop(book, news.name, "its rank actor is gone", d)


def drop(book: RunBook, name: str, cause: str, d: Decision) -> RunBook:
    """Member ``name`` is gone, whoever saw it go (the control plane, a plan that
    found no actor, a rank stuck in its step): it leaves the run's actors and ready
    ranks, and the run recovers from its loss."""
    return lost(replace(book, members=_members.left(book.members, name)), [name], cause, d)


def lost(book: RunBook, names: list[str], cause: str, d: Decision) -> RunBook:
    """Members ``names`` are gone: recover (survive or form), or park the ranks
    when fewer than ``min_workers`` are left. Losses during one recovery make one
    recovery, with all their causes."""
    plan = book.plan
    if plan is None or plan.stop or not set(names) & set(plan.members):
        return book
    survivors = [m for m in plan.members if m not in names and m in book.members.actors]
    book = _pending.opened(book, names, cause, len(plan.members), d.now)
    pending = book.recovery.pending
    assert pending is not None
    book = _status.set_health(book, Health.DEGRADED, pending.cause, d)
    minimum = book.options.min_workers
    if len(survivors) < minimum:
        why = f"{len(survivors)} worker(s) left, min_workers={minimum}"
        book = _status.set_state(book, RunState.STALLED, why, d)
        return _pending.made_for(new_plan(book, [], How.FORM, d), None)
    book = _status.set_state(book, RunState.RECOVERING, pending.cause, d)
    d.do(PublishProgress())  # dashboards: the lost tile at once
    left = set(plan.members) - set(names)
    fast = book.options.fast_recovery and len(names) == 1 and book.gens.can_survive(plan.gen, left)
    book = new_plan(book, survivors, How.SURVIVE if fast else How.FORM, d, lost=names[0])
    return _pending.made_for(book, book.plan)


# ---- reports of a generation


def on_synced(book: RunBook, r: Report, d: Decision) -> RunBook:
    """A member trains generation ``r.gen`` from ``r.step``: once all do, the run
    is running (unless a recovery is still to be completed by ``resumed``)."""
    synced = book.gens.synced.get(r.gen, frozenset()) | {r.name}
    verified = book.gens.verified | ({r.gen} if SyncedData.of(r).verified else set())
    gens = replace(book.gens, synced=put(book.gens.synced, r.gen, synced), verified=verified)
    book = _status.stepped(replace(book, gens=gens), r.step, d, at_least=True)
    plan = book.plan
    if plan is None or r.gen != plan.gen or not synced >= set(plan.members):
        return book
    book = _status.alive(book, d)
    if book.recovery.pending is not None:
        return book
    book = _status.set_state(book, RunState.RUNNING, f"{len(plan.members)} workers", d)
    return _status.update_health(book, d)


def on_prepared(book: RunBook, r: Report, d: Decision) -> RunBook:
    """A member built its survivor groups: a single loss may take the fast path."""
    gen = PreparedData.of(r).prepared_gen
    prepared = book.gens.prepared.get(gen, frozenset()) | {r.name}
    return replace(book, gens=replace(book.gens, prepared=put(book.gens.prepared, gen, prepared)))
