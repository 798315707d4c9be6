"""A step's parts summed in part order over real gloo groups of 3, 2 and 1 ranks."""

from __future__ import annotations

import datetime
import itertools
import threading
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ft_notebook.train._sharding import split
from ft_notebook.train.rank._collectives import Collectives
from ft_notebook.train.rank._groups import PeerFailed, Waker
from ft_notebook.train.rank._ordered_sum import Parts, in_process_sum, owned_slices

LENGTH = 1001  # not a multiple of any world size: the owners' slices differ in length


def _parts(count: int) -> list[torch.Tensor]:
    """Rows whose sum depends on the order it is taken in: magnitudes 1e-4 to 1e4."""
    g = torch.Generator().manual_seed(7)
    return [
        torch.randn(LENGTH, generator=g) * 10.0 ** torch.randint(-4, 5, (LENGTH,), generator=g)
        for _ in range(count)
    ]


def _on_ranks(world: int, body: Callable[[Collectives, int], Any], timeout_s: float = 30) -> list:
    """Run ``body(collectives, rank)`` on ``world`` threads, each a rank of one gloo group."""
    store = dist.HashStore()
    results: list[Any] = [None] * world

    def rank_main(rank: int) -> None:
        group = dist.ProcessGroupGloo(
            dist.PrefixStore("t", store), rank, world, datetime.timedelta(seconds=timeout_s)
        )
        collectives = Collectives(Waker())
        collectives.gen = types.SimpleNamespace(rank=rank, world=world, group=group)  # type: ignore[assignment]
        try:
            results[rank] = body(collectives, rank)
        except BaseException as e:  # handed to the test
            results[rank] = e

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout_s + 30)
    return results


def _summed_on(world: int, rows: list[torch.Tensor]) -> list[torch.Tensor]:
    """Every rank's sum, the parts spread over ``world`` ranks as the trainer spreads
    them (consecutive runs of parts), each rank's last part being its output buffer."""
    owners = [list(range(*split(len(rows), world)[r])) for r in range(world)]

    def body(collectives: Collectives, rank: int) -> torch.Tensor:
        mine = {slot: rows[slot].clone() for slot in owners[rank]}
        out = mine[owners[rank][-1]] if mine else torch.zeros(LENGTH)
        return Parts(mine, owners, out).sum(collectives, "a test sum").clone()

    return _on_ranks(world, body)


def test_every_world_size_sums_the_parts_bit_for_bit_in_part_order() -> None:
    rows = _parts(5)
    folded = rows[0].clone()
    for row in rows[1:]:
        folded += row
    # the order matters for these rows: a test of the order can fail
    reverse = rows[4].clone()
    for row in reversed(rows[:4]):
        reverse += row
    assert not torch.equal(reverse, folded)
    for world in (3, 2, 1, 5):
        sums = _summed_on(world, rows)
        for rank, got in enumerate(sums):
            assert isinstance(got, torch.Tensor), got
            assert torch.equal(got, folded), (world, rank, (got - folded).abs().max())
    shares = [Parts({s: rows[s]}, [[0], [1], [2], [3], [4]], rows[s]) for s in range(5)]
    assert torch.equal(in_process_sum(shares), folded)


def test_a_rank_with_no_part_still_gets_the_sum() -> None:
    rows = _parts(2)
    owners = [[0], [1], []]  # more ranks than parts (deterministic chunks can do this)

    def body(collectives: Collectives, rank: int) -> torch.Tensor:
        mine = {slot: rows[slot].clone() for slot in owners[rank]}
        out = mine[owners[rank][0]] if mine else torch.zeros(LENGTH)
        return Parts(mine, owners, out).sum(collectives, "a test sum").clone()

    for got in _on_ranks(3, body):
        assert torch.equal(got, rows[0] + rows[1])


def test_the_owned_slices_cover_the_buffer_once() -> None:
    for length, world in ((1001, 3), (2, 3), (10, 1)):
        bounds = owned_slices(length, world)
        assert bounds[0][0] == 0
        assert bounds[-1][1] == length
        assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))


def test_a_peer_that_never_sends_fails_the_sum_within_the_group_timeout() -> None:
    rows = _parts(2)
    owners = [[0], [1]]

    def body(collectives: Collectives, rank: int) -> Any:
        if rank == 1:
            return None  # lost before it sent anything
        return Parts({0: rows[0].clone()}, owners, rows[0].clone()).sum(collectives, "a sum")

    first, _ = _on_ranks(2, body, timeout_s=2)
    assert isinstance(first, PeerFailed), first
    assert "a sum failed" in str(first)
