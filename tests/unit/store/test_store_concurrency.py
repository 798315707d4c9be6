"""Two writers on one run, in threads of one process, cannot corrupt each other.
(Writers in separate processes: tests/chaos/test_store_kill.py.)"""

from __future__ import annotations

import threading
from typing import Any

import torch

from ft_notebook.exceptions import StoreError
from ft_notebook.store import CheckpointStore


def test_interleaved_writers_with_retention_leave_only_verified_checkpoints(url: str) -> None:
    shared = torch.randn(300_000)  # deduplicated between the writers, collected by neither
    errors: list[BaseException] = []

    def writer(parity: int) -> None:
        store = CheckpointStore(url, keep=2, publish_events=False)
        try:
            for step in range(parity, 24, 2):
                store.save(
                    "r", step, {"shared": shared, "own": torch.full((300_000,), float(step))}
                )
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    store = CheckpointStore(url, keep=2, publish_events=False)
    for info in store.list("r"):
        assert store.verify("r", info.step).step == info.step
    ck = store.load("r")
    assert ck.step == 23
    assert torch.equal(ck.state["shared"], shared)
    assert torch.equal(ck.state["own"], torch.full((300_000,), 23.0))


def test_two_writers_of_the_same_step_one_wins(url: str) -> None:
    barrier = threading.Barrier(2)
    outcomes: list[Any] = []

    def writer(value: float) -> None:
        store = CheckpointStore(url, publish_events=False)
        barrier.wait(10)
        try:
            outcomes.append(store.save("r", 7, {"x": torch.full((300_000,), value)}))
        except StoreError as e:
            outcomes.append(e)

    threads = [threading.Thread(target=writer, args=(v,)) for v in (1.0, 2.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    errors = [o for o in outcomes if isinstance(o, StoreError)]
    assert len(outcomes) == 2
    assert len(errors) == 1
    assert "already has a committed checkpoint at step 7" in str(errors[0])
    loaded = CheckpointStore(url).load("r", 7).state["x"]
    assert float(loaded[0]) in (1.0, 2.0)
    assert bool((loaded == loaded[0]).all())
