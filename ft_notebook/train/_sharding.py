"""Which samples each rank trains on, so that no sample is lost or used twice.

Every epoch has one seeded global order of the dataset. A run's progress through it
is a :class:`DataCursor` given by its step alone (``Trainer.cursor``): step k of an
epoch takes samples k·batch to (k+1)·batch of the order, and a step that dies before
it commits is taken again, whole, by the ranks alive at the next step boundary. So
within an epoch every sample is used exactly once whatever the world size does. The
trainer cuts a step's samples with :func:`split` and :func:`split_chunks`
(``Trainer.slices``); each piece's share of the step is its weight in the sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ft_notebook.exceptions import TrainingError


@dataclass(frozen=True)
class DataCursor:
    """Where a run is in its data: epoch, and samples of its order already committed."""

    epoch: int = 0
    position: int = 0


def epoch_order(seed: int, epoch: int, size: int) -> np.ndarray:
    """The epoch's permutation of ``range(size)``: the same on every rank and restart."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch])))
    return rng.permutation(size)


def split(batch: int, world: int) -> list[tuple[int, int]]:
    """Cut ``batch`` samples into ``world`` contiguous parts whose sizes differ by at
    most one, the larger ones first; returns (start, stop) per rank."""
    if world < 1:
        raise TrainingError(f"A step needs at least one rank, got a world size of {world}.")
    base, extra = divmod(batch, world)
    bounds, start = [], 0
    for rank in range(world):
        stop = start + base + (1 if rank < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def split_chunks(n: int, chunk: int) -> list[tuple[int, int]]:
    """Cut ``n`` samples into chunks of ``chunk`` (the last one shorter): the fixed
    pieces a deterministic run sums in the same order whatever the world size."""
    return [(start, min(start + chunk, n)) for start in range(0, n, chunk)]
