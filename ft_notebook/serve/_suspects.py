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

from ft_notebook.serve._rotation import ReplicaView


class InFlight:
    """One request in the router: the replicas it has an attempt on, and those it
    marked as holding a *suspect* (a request that has lost a replica; one a replica)."""

    def __init__(self) -> None:
        self.on: set[ReplicaView] = set()
        self.marked: list[ReplicaView] = []

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
