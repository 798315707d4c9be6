"""Which workers have rank actors of a run, and how they get one.

The functions here decide on the member book (written by :mod:`._members`): the
first start of a run (an actor per worker, warm-up, the first generation), actors
started for workers that join later, the control plane's news of workers lost, hung
and joined, and admitting joiners, once they are warm, into a new generation (at the
next step boundary). ``recovery.joins`` is completed when a joiner
first trains (:mod:`._recoveries`).
"""

from __future__ import annotations

from dataclasses import replace

from ft_notebook.cluster.plugins import name_key
from ft_notebook.events import RunState
from ft_notebook.train.coordinator import _end, _generations, _members, _status
from ft_notebook.train.coordinator._actions import (
    After,
    Decision,
    Log,
    PublishProgress,
    SendPlan,
    StartActor,
)
from ft_notebook.train.coordinator._book import RunBook
from ft_notebook.train.coordinator._inputs import (
    ActorStarted,
    Launched,
    LaunchFailed,
    WarmupOver,
    WorkerNews,
)
from ft_notebook.train.protocol import How, Report

# ---- the first generation


def on_launched(book: RunBook, launch: Launched, d: Decision) -> RunBook:
    """Start a rank actor on each worker (up to ``max_workers``); the first generation
    forms once they are all warm (:func:`on_ready`) or the warm-up is over."""
    if book.finished:
        return book
    limit = book.options.max_workers or len(launch.workers)
    chosen = launch.workers[:limit]
    members = _members.launched(book.members, chosen)
    for name, address in chosen:
        d.do(StartActor(name, address, first=True))
    d.do(After(book.options.warmup_timeout_s, WarmupOver(0.0)))
    return _form_first_if_warm(replace(book, store=launch.store, members=members), d)


def on_launch_failed(book: RunBook, failed: LaunchFailed, d: Decision) -> RunBook:
    if book.finished:
        return book
    return _end.finish(book, RunState.FAILED, f"the run could not start: {failed.error}", d)


def on_warmup_over(book: RunBook, d: Decision) -> RunBook:
    """The warm-up time is up: the ranks ready train, or the run fails saying how few."""
    if book.finished or book.plan is not None:
        return book
    return _form_first(book, d)


def _form_first_if_warm(book: RunBook, d: Decision) -> RunBook:
    """Form the first generation once every actor is warm and there are enough of
    them; with fewer than ``min_workers``, workers that join during the warm-up may
    still come (a cluster just started registers its workers one by one)."""
    if book.finished or book.plan is not None:
        return book
    actors = book.members.actors
    if book.members.ready.keys() >= set(actors) and len(actors) >= book.options.min_workers:
        return _form_first(book, d)
    return book


def _form_first(book: RunBook, d: Decision) -> RunBook:
    ready = [n for n in book.members.actors if n in book.members.ready]
    minimum = book.options.min_workers
    if len(ready) < max(1, minimum):
        why = f"{len(ready)} worker(s) finished warming up in time, min_workers={minimum}"
        return _end.finish(book, RunState.FAILED, why, d)
    members = _members.began(book.members, ready)
    book = _status.set_state(
        replace(book, members=members), RunState.RUNNING, f"{len(ready)} workers", d
    )
    return _generations.new_plan(book, ready, How.FORM, d)


def on_actor_started(book: RunBook, started: ActorStarted, d: Decision) -> RunBook:
    """An actor's start answered. One that failed leaves the run's actors (the warm-up
    may be complete without it); one that started after its run ended is sent the stop
    plan: its stop may have reached the worker before the actor existed, and an actor
    never stopped keeps its model and data, and draws beside the next run's ranks."""
    name, address = started.name, started.address
    if started.error:
        d.do(Log("warning", f"could not start a rank of {book.name} on {name}: {started.error}"))
        if book.members.actors.get(name) != address:
            return book
        book = replace(book, members=_members.not_started(book.members, name))
        return _form_first_if_warm(book, d)
    if book.finished and book.plan is not None:
        d.do(SendPlan(name, address, book.plan))
    return book


# ---- workers coming and going


def on_news(book: RunBook, news: WorkerNews, d: Decision) -> RunBook:
    """The control plane's news of worker ``name``: ``lost``, ``hung`` or ``joined``."""
    if book.finished:
        return book
    members, name = book.members, news.name
    if news.kind in ("lost", "hung"):
        if members.actors.get(name) == news.address:
            return _generations.drop(book, name, news.cause or f"worker {news.kind}", d)
        return book
    if news.kind != "joined" or name in members.actors or name in members.evicted:
        return book
    limit = book.options.max_workers
    if limit is not None and len(members.actors) >= limit:
        return book
    d.do(StartActor(name, news.address, first=False))
    return replace(book, members=_members.joined(members, name, news.address, news.now))


def on_ready(book: RunBook, r: Report, d: Decision) -> RunBook:
    """A rank warmed up (at ``r.step``: the checkpoint it resumed from, if any)."""
    resumed_step = r.step if book.plan is None else 0
    book = replace(book, members=_members.warm(book.members, r.name, r.time, resumed_step))
    if book.plan is None:
        return _form_first_if_warm(book, d)
    return admit(book, d)


def on_synced(book: RunBook, r: Report, d: Decision) -> RunBook:
    """A member trains generation ``r.gen``; once all do, the joiners that were warm
    while it formed are admitted (:func:`admit`)."""
    book = _generations.on_synced(book, r, d)
    plan = book.plan
    if plan is None or r.gen != plan.gen:
        return book
    if book.gens.synced.get(plan.gen, frozenset()) >= set(plan.members):
        return admit(book, d)
    return book


def admit_if_parked(book: RunBook, d: Decision) -> RunBook:
    """After any input: a run parked below ``min_workers`` (a generation with no
    members, which no one will sync) admits the joiners that waited for the one before
    it to form (:func:`admit`), so that with them it has enough again."""
    plan = book.plan
    if plan is None or plan.stop or plan.members:
        return book
    return admit(book, d)


def admit(book: RunBook, d: Decision) -> RunBook:
    """Ready workers not in the generation join it (at the next step boundary)."""
    plan, members = book.plan, book.members
    if plan is None or plan.stop or book.finished:
        return book
    waiting = [n for n in members.actors if n in members.ready and n not in plan.members]
    if not waiting:
        return book
    staying = [m for m in plan.members if m in members.actors]
    everyone = sorted(staying + waiting, key=name_key)
    if len(everyone) < book.options.min_workers:
        return book
    formed = book.gens.synced.get(plan.gen, frozenset()) >= set(plan.members)
    if not formed and plan.how is How.SURVIVE:
        # the survivors of a loss go on without a rendezvous: a plan now would stop
        # them and make them wait for the joiner's state transfer (the slow path a
        # replacement forked within a second made of every single kill); it is
        # admitted at a step boundary once they train (on_synced)
        return book
    if book.state is RunState.STALLED:
        book = _status.set_state(book, RunState.RECOVERING, f"{len(everyone)} workers back", d)
    # the members finish the step they are in (the newest one heard of) first: a
    # joiner back within a second of a kill must not cost the survivors the step they
    # resumed with, nor any step its state transfer does not need. Not while the
    # generation is still forming: a joiner of it that hears of this plan first skips
    # it, and its other members would wait for that joiner in the rendezvous until its
    # timeout (30 s, after a double kill whose replacements were ready 17 ms apart);
    # a plan with no boundary stops the forming, and everyone meets in the new one
    switch_at = book.highest_step + 1 if formed else 0
    book = _generations.new_plan(book, everyone, How.FORM, d, switch_at=switch_at)
    d.do(PublishProgress())
    gen = book.plan.gen if book.plan is not None else 0
    return replace(book, members=_members.admitted(book.members, waiting, gen, d.now))
