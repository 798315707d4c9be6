"""A step's gradient parts summed in part order, on whatever number of ranks.

The sum of a step's parts must not depend on the world size (see
:mod:`._trainer`): float32 addition is not associative, and an all-reduce adds in an
order its own algorithm picks, which changes with the world size. Here every rank
*owns* one slice of the flat buffer. It receives that slice of every part from the
rank that computed the part, adds the parts in part order (``p0 + p1``, then ``+ p2``,
...), and sends the summed slice to every other rank. Each element is then added in
one fixed order, the order of the parts, whoever holds them: a run that lost a
worker sums bit for bit what the undisturbed run sums.

It moves what a float32 ring all-reduce moves (each rank sends ``(world - 1) / world``
of the buffer twice, when it holds one part), where the float64 sums this replaces
sent twice that, and it needs no float64 copy of the gradients. A rank that holds
several parts (it took over a lost rank's) sends each of them: a run with fewer
workers moves more bytes per rank, never a different sum.

Point-to-point sends and receives of the generation's group carry it; every wait
goes through :class:`~._collectives.Collectives`, so a lost peer raises
:class:`~._groups.PeerFailed` and a newer plan :class:`~._groups.Interrupted`, as in
an all-reduce.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ft_notebook.train.rank._collectives import Collectives

#: The tag of the summed slices' messages; a part's messages carry its slot number.
_SUMMED_TAG = 1 << 30


@dataclass(frozen=True)
class Parts:
    """One rank's share of a step's gradient, to be summed in part order.

    ``rows``: this rank's parts, slot -> its weighted float32 gradient and loss;
    ``owners[r]``: the slots rank ``r`` holds (the same on every rank); ``out``: the
    buffer the sum lands in (the gradient views; it may be one of ``rows``)."""

    rows: dict[int, Any]
    owners: list[list[int]]
    out: Any

    def sum(self, collectives: Collectives, what: str) -> Any:
        """Sum every rank's parts into ``out``; return it."""
        sum_in_part_order(collectives, self.rows, self.owners, self.out, what)
        return self.out


def in_process_sum(shares: Sequence[Parts]) -> Any:
    """What :func:`sum_in_part_order` gives, from every rank's :class:`Parts` in one
    process (tests drive ranks this way): the rows folded in slot order."""
    rows = {slot: row for share in shares for slot, row in share.rows.items()}
    return _fold(rows, shares[0].out.new_empty(shares[0].out.numel()))


def owned_slices(length: int, world: int) -> list[tuple[int, int]]:
    """(start, stop) of the slice of a ``length`` buffer that each rank owns."""
    from ft_notebook.train._sharding import split

    return split(length, world)


def sum_in_part_order(
    collectives: Collectives,
    rows: Mapping[int, Any],
    owners: Sequence[Sequence[int]],
    out: Any,
    what: str,
) -> None:
    """Write into ``out`` the sum, in slot order, of every rank's parts.

    ``rows``: this rank's parts, slot -> a 1-D tensor of ``out``'s length (``out``
    itself may be one of them); ``owners[r]``: the slots rank ``r`` holds, the same
    list on every rank (every slot on exactly one rank, empty slots on none)."""
    gen = collectives.current()
    rank, world = gen.rank, gen.world
    bounds = owned_slices(out.numel(), world)
    lo, hi = bounds[rank]
    mine = sorted(rows)  # sent in slot order, as the peer posts its receives
    parts: dict[int, Any] = {slot: rows[slot][lo:hi] for slot in mine}
    works = []
    for peer in range(world):
        if peer == rank:
            continue
        start, stop = bounds[peer]
        for slot in mine:
            works.append(collectives.send(rows[slot][start:stop], peer, slot, what))
        for slot in owners[peer]:
            parts[slot] = out.new_empty(hi - lo)
            works.append(collectives.recv(parts[slot], peer, slot, what))
    collectives.finish(works, what)
    summed = _fold(parts, out.new_empty(hi - lo))
    out[lo:hi].copy_(summed)  # after every send of this rank's parts (``out`` may be one)
    works.clear()
    for peer in range(world):
        if peer == rank:
            continue
        start, stop = bounds[peer]
        works.append(collectives.send(out[lo:hi], peer, _SUMMED_TAG, what))
        works.append(collectives.recv(out[start:stop], peer, _SUMMED_TAG, what))
    collectives.finish(works, what)


def _fold(parts: Mapping[int, Any], into: Any) -> Any:
    """``parts`` added in slot order into ``into`` (zeros when there are none)."""
    slots = sorted(parts)
    if not slots:
        return into.zero_()
    into.copy_(parts[slots[0]])
    for slot in slots[1:]:
        into += parts[slot]
    return into
