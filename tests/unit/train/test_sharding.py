from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ft_notebook.exceptions import TrainingError
from ft_notebook.train._sharding import (
    DataCursor,
    advance,
    check_batch,
    epoch_order,
    sample_rng,
    shard,
    split,
)


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(1, 300),
    global_batch=st.integers(1, 40),
    worlds=st.lists(st.integers(1, 6), min_size=1, max_size=400),
    failures=st.lists(st.booleans(), min_size=1, max_size=400),
)
def test_every_sample_is_used_exactly_once_whatever_the_world_does(
    size: int, global_batch: int, worlds: list[int], failures: list[bool]
) -> None:
    """The world size changes at step boundaries, and some steps fail before they
    commit (their samples were handed out but the cursor did not move)."""
    order = epoch_order(seed=7, epoch=0, size=size)
    cursor = DataCursor()
    used: list[int] = []
    step = 0
    while cursor.epoch == 0:
        world = worlds[step % len(worlds)]
        shards = [shard(order, cursor, global_batch, r, world) for r in range(world)]
        assert sum(s.weight for s in shards) == pytest.approx(1.0)
        if failures[step % len(failures)] and step % 3:  # the step dies: nothing commits
            step += 1
            continue
        used += [int(i) for s in shards for i in s.indices]
        cursor = advance(cursor, global_batch, size)
        step += 1
    assert sorted(used) == list(range(size))
    assert cursor == DataCursor(1, 0)


def test_the_order_depends_on_seed_and_epoch_only() -> None:
    a = epoch_order(1, 0, 1000)
    assert np.array_equal(a, epoch_order(1, 0, 1000))
    assert not np.array_equal(a, epoch_order(1, 1, 1000))
    assert not np.array_equal(a, epoch_order(2, 0, 1000))
    assert sorted(a.tolist()) == list(range(1000))


def test_sample_randomness_is_keyed_by_sample_not_rank() -> None:
    assert sample_rng(3, 1, 42).random() == sample_rng(3, 1, 42).random()
    assert sample_rng(3, 1, 42).random() != sample_rng(3, 1, 43).random()


def test_split_is_contiguous_and_balanced() -> None:
    assert split(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split(2, 3) == [(0, 1), (1, 2), (2, 2)]
    with pytest.raises(TrainingError, match="at least one rank"):
        split(4, 0)


def test_bad_batches_are_refused_with_the_fix() -> None:
    with pytest.raises(TrainingError, match="batch size 2 is smaller than the number of workers"):
        check_batch(2, 3, 100)
    with pytest.raises(TrainingError, match="empty"):
        check_batch(8, 2, 0)
    with pytest.raises(TrainingError, match="epoch is over"):
        shard(epoch_order(0, 0, 4), DataCursor(0, 4), 2, 0, 1)
