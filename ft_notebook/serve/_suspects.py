"""Suspects: requests that lost a replica under them, which may be what kills replicas.

A request whose replica failed under it is re-sent once (see the router). If it is a
poison request (an input that crashes the model's process), its next replica dies
too, and so does every other request in flight there; a request that had lost a
replica before would then have lost two, and be taken for a poison request itself. So a
replica holds one suspect at a time, and a request that lost a replica turns its
attempts in flight elsewhere (its hedges) into suspects at once, before anyone is
re-sent (:meth:`InFlight.mark`, called for every holder of a lost replica).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping

from ft_notebook.serve._rotation import ReplicaView

#: How long after a second replica lost under one request the others are asked
#: whether they still answer (see :func:`others_answer`).
_TOGETHER_S = 0.3
#: How often, meanwhile, the router's rotation is read for replicas gone too.
_LOOK_EVERY_S = 0.005


class InFlight:
    """One request in the router: the replicas it has an attempt on, and those it
    marked as holding a *suspect* (a request that has lost a replica; one a replica).

    ``present``: the replicas in the router when the request came (key ->
    incarnation). Only they can witness that a request is poison: a replica started
    since (a killed worker's replacement, back within a second) answering proves
    nothing of an outage that took every replica the request could have met."""

    def __init__(self, present: Mapping[str, ReplicaView] | None = None) -> None:
        self.on: set[ReplicaView] = set()
        self.marked: list[ReplicaView] = []
        self.present = {k: v.incarnation for k, v in (present or {}).items()}

    def witnessed(self, view: ReplicaView) -> bool:
        """Whether ``view`` was in the router, this incarnation of it, when we came."""
        return self.present.get(view.key) == view.incarnation

    def sent(self, view: ReplicaView, *, suspect: bool) -> None:
        self.on.add(view)
        view.holders.add(self)
        if suspect:
            self.mark(view)

    def mark(self, view: ReplicaView) -> None:
        if not view.suspect:
            view.suspect = True
            self.marked.append(view)

    def handled(self, view: ReplicaView) -> None:
        """The attempt on ``view`` is over and its outcome handled."""
        self.on.discard(view)
        view.holders.discard(self)
        if view in self.marked:
            self.marked.remove(view)
            view.suspect = False

    def release(self) -> None:
        for view in list(self.on):
            self.handled(view)
        for view in self.marked:
            view.suspect = False
        self.marked.clear()


def spread_loss(view: ReplicaView) -> None:
    """``view``'s replica failed or left: every request that was on it now holds a
    suspect wherever else it is."""
    for holder in list(view.holders):
        for other in holder.on:
            if other is not view:
                holder.mark(other)


async def others_answer(
    views: Mapping[str, ReplicaView],
    tried: set[str],
    request: InFlight,
    answers: Callable[[ReplicaView], Awaitable[bool]],
) -> bool:
    """After a second replica lost under one request: does a replica it was not
    sent to, there when it came, answer now (``answers``: a ping)? Then the input is
    the likely cause (a PoisonRequest); a replacement started since would answer
    after any outage. When none does, the replicas are going down together (their
    workers killed, the machine short of memory), and the request goes the usual
    way: re-sent, or to the fallback."""
    # workers killed together go one after another, ~30 ms apart: a moment later
    # the third of them is gone too, and a ping at once would have found it alive.
    # Once every other one has gone out of rotation meanwhile there is nothing to wait
    # for: the requests caught by an outage go to the fallback then, not 0.3 s later.
    # One out since before may come back in the time (a breaker's probe): it is waited
    # for, as it may still witness the input
    started = time.monotonic()
    while True:
        witnesses = [v for k, v in views.items() if k not in tried and request.witnessed(v)]
        others = [v for v in witnesses if v.breaker.in_rotation()]
        over = time.monotonic() - started >= _TOGETHER_S
        if not others and (over or all(v.breaker.opened_at >= started for v in witnesses)):
            return False
        if over:
            break
        await asyncio.sleep(_LOOK_EVERY_S)
    return any(await asyncio.gather(*(answers(v) for v in others)))


async def pick_for_suspect(
    pick: Callable[[set[str]], ReplicaView | None],
    views: Mapping[str, ReplicaView],
    tried: set[str],
    deadline: float,
) -> ReplicaView | None:
    """A replica for a request whose replica was lost under it (a suspect): one with
    no other suspect in flight, waiting for one if need be (``pick``: the router's
    choice among those not excluded). Two suspects on one replica that a poison
    request then kills would both have lost two replicas, the innocent one too; alone,
    only the poison request has. (A replica that runs suspects in a fork loses
    nothing to them; one on CUDA runs them itself.)

    The requests that were on the lost replica hold suspects wherever else they are
    (their hedges), marked as the loss was seen (:func:`spread_loss`): re-sent there,
    a poison request killed an innocent one's hedge too."""
    while True:
        busy = unsafe_beside_a_suspect(views)
        view = pick(tried | busy)
        if view is not None or pick(tried) is None or time.monotonic() > deadline:
            return view
        await asyncio.sleep(0.002)


def unsafe_beside_a_suspect(views: Mapping[str, ReplicaView]) -> set[str]:
    """The replicas another request must not be sent to now: those running a suspect in
    their own process (one that cannot fork), which a poison request would kill."""
    return {v.key for v in views.values() if v.suspect and not v.forks}
