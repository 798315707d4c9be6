"""Hangs that heartbeats do not show: a rank whose step stops advancing while its
heartbeats go on.

On each watchdog tick (twice a second, :func:`on_tick`) a running run's progress may
be published (:mod:`._publisher`), and once its step has stood still for
:func:`stall_threshold` the members are asked where they are (one question at a
time: ``RunBook.asked``). A member stuck computing is evicted (the others go on
without it); every member stuck fails the run (:func:`on_rank_states`).
``RunBook.last_advance`` is when training was last seen going on.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from ft_notebook.events import RunState
from ft_notebook.train.coordinator import _end, _generations, _status
from ft_notebook.train.coordinator._actions import AskStates, Decision, EvictWorker, Log
from ft_notebook.train.coordinator._book import RunBook
from ft_notebook.train.coordinator._inputs import RankStates
from ft_notebook.train.protocol import Phase

#: A step every rank is stuck in fails the run after this many stall thresholds (one
#: stuck rank is evicted after one: the others go on without it).
ALL_STUCK_AFTER = 3


def stall_threshold(book: RunBook) -> float:
    """Seconds a step may stand still before it is a hang: the options' floor for the
    first steps, then ``stall_factor`` x the median step time (at least ``stall_min_s``)."""
    o = book.options
    if len(book.progress.step_times) < 5:
        return o.first_steps_floor_s
    return max(o.stall_min_s, o.stall_factor * statistics.median(book.progress.step_times))


def _watched(book: RunBook) -> bool:
    plan = book.plan
    active = book.state in (RunState.RUNNING, RunState.RECOVERING)
    return active and plan is not None and not plan.stop


def on_tick(book: RunBook, d: Decision) -> RunBook:
    """Ask the members where they are once the step stood still for the threshold."""
    if not _watched(book) or book.asked is not None or book.plan is None:
        return book
    if d.now - book.last_advance < stall_threshold(book):
        return book
    plan = book.plan
    addresses = tuple((n, book.members.actors[n]) for n in plan.members if n in book.members.actors)
    d.do(AskStates(plan.gen, addresses))
    return replace(book, asked=plan.gen)


def on_rank_states(book: RunBook, answer: RankStates, d: Decision) -> RunBook:
    """Where the members said they are: evict those stuck computing, or fail the run
    when every member is stuck for :data:`ALL_STUCK_AFTER` thresholds."""
    book = replace(book, asked=None)
    plan = book.plan
    if not _watched(book) or plan is None or plan.gen != answer.gen:
        return book
    threshold = stall_threshold(book)
    states = answer.states
    stuck = [n for n, s in states.items() if s and s.get("phase") == Phase.COMPUTE]
    if not stuck:
        return book
    if len(stuck) == len(plan.members):  # no healthy rank to go on with
        waited = d.now - book.last_advance
        if waited < ALL_STUCK_AFTER * threshold:
            return book
        at = sorted({str(states[n].get("step")) for n in stuck})  # theirs: newer
        why = (
            f"every worker ({', '.join(stuck)}) has been computing step {' or '.join(at)} "
            f"for {waited:.0f} s, {ALL_STUCK_AFTER}x the run's stall threshold: the "
            f"training code or its data loading hangs on all of them (a deadlock, a hung "
            f"filesystem). Their logs (run.logs()) say where; fix that, then go on from "
            f"the newest checkpoint with ft.fit(..., resume=True)."
        )
        return _end.finish(book, RunState.FAILED, why, d)
    for name in stuck:
        address = book.members.actors.get(name)
        d.do(
            Log(
                "warning",
                f"run {book.name}: {name} has not finished step {book.step} in "
                f"{threshold:.0f} s: evicting it",
            )
        )
        if address is not None:
            book = _generations.drop(book, name, f"step not advancing for {threshold:.0f} s", d)
            d.do(EvictWorker(address))
    return _status.alive(book, d)
