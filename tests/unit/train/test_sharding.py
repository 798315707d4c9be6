"""Which samples each rank trains on, through the trainer's own path
(``Trainer.step_indices`` and ``Trainer.slices``, what ``local_gradients`` uses)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ft_notebook.exceptions import TrainingError
from ft_notebook.testing.training import regression_problem
from ft_notebook.train._sharding import epoch_order, split, split_chunks
from ft_notebook.train.rank._trainer import Trainer
from ft_notebook.train.spec import FitSpec

MODES: dict[str, dict[str, Any]] = {
    "float64 sums": {},
    "float32": {"ordered_sums": False},
    "deterministic": {"deterministic": True, "chunk_size": 4},
}


def _trainer(size: int, batch: int, mode: str) -> Trainer:
    spec = FitSpec(epochs=2, **regression_problem(size=size, batch=batch), **MODES[mode])
    return Trainer(spec, torch.device("cpu"))


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(8, 120),
    batch=st.integers(6, 24),
    worlds=st.lists(st.integers(1, 6), min_size=1, max_size=60),
    failures=st.lists(st.booleans(), min_size=1, max_size=60),
    mode=st.sampled_from(sorted(MODES)),
)
def test_every_sample_is_used_exactly_once_whatever_the_world_does(
    size: int, batch: int, worlds: list[int], failures: list[bool], mode: str
) -> None:
    """The world size changes at step boundaries, and some steps die before they
    commit: the survivors take that step again, whole."""
    trainer = _trainer(size, batch, mode)
    used: list[int] = []
    step = attempt = 0
    largest = 0
    while step < trainer.steps_per_epoch:
        world = worlds[attempt % len(worlds)]
        largest = max(largest, world)
        indices = trainer.step_indices(step)
        taken = [
            (lo, hi)
            for rank in range(world)
            for _, lo, hi in trainer.slices(len(indices), rank, world, largest)
        ]
        covered = sorted(i for lo, hi in taken for i in range(lo, hi))
        assert covered == list(range(len(indices)))  # each of the step's samples once
        attempt += 1
        if failures[attempt % len(failures)] and attempt % 3:  # died: nothing committed
            continue
        used += [int(indices[i]) for i in covered]
        step += 1
    assert sorted(used) == list(range(size))
    assert trainer.cursor(step).epoch == 1


def test_a_slot_is_the_same_piece_whatever_the_world_size() -> None:
    """What makes sums world-size invariant: a piece's bounds and seed slot depend on
    the step (and the run's largest world, for float64 sums), not on who computes it."""
    for mode in ("float64 sums", "deterministic"):
        trainer = _trainer(96, 24, mode)
        pieces = {
            world: sorted(s for rank in range(world) for s in trainer.slices(24, rank, world, 3))
            for world in (1, 2, 3)
        }
        assert pieces[1] == pieces[2] == pieces[3], mode


def test_the_order_depends_on_seed_and_epoch_only() -> None:
    a = epoch_order(1, 0, 1000)
    assert np.array_equal(a, epoch_order(1, 0, 1000))
    assert not np.array_equal(a, epoch_order(1, 1, 1000))
    assert not np.array_equal(a, epoch_order(2, 0, 1000))
    assert sorted(a.tolist()) == list(range(1000))


def test_split_is_contiguous_and_balanced() -> None:
    assert split(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split(2, 3) == [(0, 1), (1, 2), (2, 2)]
    assert split_chunks(10, 4) == [(0, 4), (4, 8), (8, 10)]
    with pytest.raises(TrainingError, match="at least one rank"):
        split(4, 0)
