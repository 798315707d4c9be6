"""Which samples each rank trains on, so that no sample is lost or used twice.

Every epoch has one seeded global order of the dataset. A run's progress through it
is a single :class:`DataCursor` that moves only when a step commits. Each step takes
the next ``global_batch`` samples of the order and splits them among the ranks that
are alive at that step boundary; so when a worker dies mid-step, the uncommitted
step is simply taken again by the survivors, and within an epoch every sample is
used exactly once whatever the world size does. Each rank's share is also its weight
in the gradient average. Randomness of a sample (augmentation) is keyed by seed,
epoch and index, never by rank, so it does not change when the world does.
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


@dataclass(frozen=True)
class Shard:
    """One rank's part of one step."""

    indices: np.ndarray  # dataset indices, in the epoch's order
    weight: float  # its share of the step's samples (the weights of a step sum to 1)


def epoch_order(seed: int, epoch: int, size: int) -> np.ndarray:
    """The epoch's permutation of ``range(size)``: the same on every rank and restart."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch])))
    return rng.permutation(size)


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The random generator of one sample in one epoch (for augmentation)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, index, 1])))


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


def shard(order: np.ndarray, cursor: DataCursor, global_batch: int, rank: int, world: int) -> Shard:
    """Rank ``rank``'s samples of the step that starts at ``cursor``."""
    start = cursor.position
    stop = min(start + global_batch, len(order))
    if start >= stop:
        raise TrainingError(
            f"The cursor is at sample {start} of an epoch of {len(order)}: the epoch is "
            f"over; advance() moves to the next one."
        )
    lo, hi = split(stop - start, world)[rank]
    return Shard(order[start + lo : start + hi], (hi - lo) / (stop - start))


def advance(cursor: DataCursor, global_batch: int, size: int) -> DataCursor:
    """The cursor after the step at ``cursor`` committed."""
    position = min(cursor.position + global_batch, size)
    if position >= size:
        return DataCursor(cursor.epoch + 1, 0)
    return DataCursor(cursor.epoch, position)


def check_batch(global_batch: int, max_world: int, size: int) -> None:
    """Refuse a batch that cannot give every rank a sample, before the run starts."""
    if global_batch < max_world:
        raise TrainingError(
            f"The batch size {global_batch} is smaller than the number of workers "
            f"({max_world}): some would get no sample at all. Use a batch size of at "
            f"least {max_world}, or set max_workers={global_batch}."
        )
    if size < 1:
        raise TrainingError("The dataset is empty: there is nothing to train on.")
