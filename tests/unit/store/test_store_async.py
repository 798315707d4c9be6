"""save_async: the caller pays for a copy; a writer thread commits; handles report."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from ft_notebook.exceptions import StoreError
from ft_notebook.store import CheckpointStore, SaveState
from ft_notebook.store._faults import set_stage_hook
from ft_notebook.testing import poll_for

WRITER = "ft-notebook-store-writer"


class Gate:
    """Holds the writer thread at its first stage until opened."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.opened = threading.Event()

    def __call__(self, stage: str) -> None:
        if threading.current_thread().name.startswith(WRITER):
            self.reached.set()
            assert self.opened.wait(30), "the test never opened the gate"


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    previous = set_stage_hook(g)
    try:
        yield g
    finally:
        g.opened.set()
        set_stage_hook(previous)


def _writers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WRITER)]


def test_a_save_returns_before_it_is_written_and_reports_when_it_is(
    store: CheckpointStore, gate: Gate
) -> None:
    t = torch.arange(300_000.0)
    handle = store.save_async("r", 1, {"t": t}, {"epoch": 1})
    assert handle.stall_s > 0
    assert not handle.done()
    gate.reached.wait(10)
    assert handle.state is SaveState.WRITING
    t.add_(1)  # the caller goes on training: the copy was taken
    gate.opened.set()
    assert handle.wait(30)
    assert handle.done()
    assert handle.state is SaveState.COMMITTED
    assert handle.exception() is None
    info = handle.result()
    assert (info.step, info.metadata) == (1, {"epoch": 1})
    assert torch.equal(store.load("r").state["t"], torch.arange(300_000.0))
    poll_for(lambda: not _writers(), timeout=10, what="the writer thread to end when idle")


def test_a_queued_save_is_superseded_by_a_newer_one(store: CheckpointStore, gate: Gate) -> None:
    first = store.save_async("r", 1, {"x": 1})
    assert gate.reached.wait(10)
    second = store.save_async("r", 2, {"x": 2})
    third = store.save_async("r", 3, {"x": 3})
    assert second.done()
    assert second.state is SaveState.SUPERSEDED
    assert second.superseded_by == 3
    assert second.exception() is None
    with pytest.raises(StoreError, match="superseded by step 3 before it was written"):
        second.result()
    assert [h.step for h in store.pending()] == [1, 3]
    gate.opened.set()
    assert third.result(timeout=30).step == 3
    assert first.result(timeout=30).step == 1
    assert [i.step for i in store.list("r")] == [1, 3]
    assert store.pending() == []


def test_saves_of_different_runs_do_not_supersede_each_other(
    store: CheckpointStore, gate: Gate
) -> None:
    handles = [store.save_async(run, 1, {"x": run}) for run in ("a", "b", "c")]
    gate.opened.set()
    assert store.flush(timeout=30)
    assert [h.state for h in handles] == [SaveState.COMMITTED] * 3
    assert store.runs() == ["a", "b", "c"]


def test_a_failed_write_is_on_the_handle(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device", "/somewhere/blobs/x")

    location = store._locations[0]
    monkeypatch.setattr(location, "write_blobs", broken)
    handle = store.save_async("r", 1, {"x": torch.ones(3)})
    assert handle.wait(30)
    assert handle.state is SaveState.FAILED
    assert isinstance(handle.exception(), StoreError)
    assert "ENOSPC" in str(handle.exception())
    with pytest.raises(StoreError, match="No space left"):
        handle.result()
    monkeypatch.undo()
    assert store.save_async("r", 1, {"x": torch.ones(3)}).result(timeout=30).step == 1


def test_bad_state_raises_in_the_caller(store: CheckpointStore) -> None:
    with pytest.raises(StoreError, match=r"state\['x'\]"):
        store.save_async("r", 1, {"x": object()})
    assert store.pending() == []


def test_result_times_out_while_the_save_is_held(store: CheckpointStore, gate: Gate) -> None:
    handle = store.save_async("r", 1, {"x": 1})
    with pytest.raises(TimeoutError, match="still"):
        handle.result(timeout=0.01)
    gate.opened.set()
    assert handle.result(timeout=30).step == 1


def test_a_process_that_exits_finishes_its_save_in_flight(tmp_path: Any) -> None:
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from ft_notebook.store import CheckpointStore\n"
        f"store = CheckpointStore({str(tmp_path / 's')!r}, publish_events=False)\n"
        "handle = store.save_async('r', 1, {'a': np.arange(2_000_000)})\n"
        "print(handle.done())\n"  # the script ends here, the save still in flight
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    ck = CheckpointStore(tmp_path / "s", publish_events=False).load("r")
    assert ck.step == 1
    assert int(ck.state["a"][-1]) == 1_999_999


def test_every_kind_of_value_round_trips_through_the_staged_copy(
    store: CheckpointStore, make_state: Any, same: Any
) -> None:
    import copy

    state = make_state(3)
    state["views"] = {
        "t": torch.arange(12.0).reshape(3, 4).t(),
        "conj": torch.tensor([1 + 2j], dtype=torch.complex64).conj(),
        "imag": torch.tensor([1 + 2j], dtype=torch.complex64).imag,
    }
    expected = copy.deepcopy(state)
    for step in (1, 2):  # the second save reuses the first one's buffers
        handle = store.save_async("r", step, state)
        state["model"]["w"].add_(1)  # after the copy: not in the checkpoint
        state["arrays"]["f64"] += 1
        handle.result(timeout=60)
        same(expected, store.load("r", step).state)
        state["model"]["w"].copy_(expected["model"]["w"])
        state["arrays"]["f64"][...] = expected["arrays"]["f64"]


def test_warmed_buffers_are_the_ones_the_first_save_copies_into(
    store: CheckpointStore, make_state: Any, same: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ft_notebook.store._tensors import staging_sizes

    state = make_state(3)
    warming = store.warm(state)
    warming.join(timeout=60)
    assert not warming.is_alive()
    pool = store._staging
    warmed = {b.data_ptr() for bufs in pool._free.values() for b in bufs}
    assert len(warmed) == len(staging_sizes(state)) > 1
    taken: list[int] = []
    take = pool.take

    def spy(nbytes: int, *, pinned: bool) -> torch.Tensor:
        buf = take(nbytes, pinned=pinned)
        taken.append(buf.data_ptr())
        return buf

    monkeypatch.setattr(pool, "take", spy)
    store.save_async("r", 1, state).result(timeout=60)
    assert set(taken) == warmed  # nothing new was made while the caller waited
    same(state, store.load("r", 1).state)


def test_a_save_that_comes_while_its_buffers_are_warming_waits_for_them(
    store: CheckpointStore, make_state: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = make_state(3)
    pool = store._staging
    take = pool.take
    gate = threading.Event()
    made: list[int] = []
    taken: list[int] = []

    def spy(nbytes: int, *, pinned: bool) -> torch.Tensor:
        if threading.current_thread().name == "ft-notebook-store-warm":
            assert gate.wait(30)
            made_buf = take(nbytes, pinned=pinned)
            made.append(made_buf.data_ptr())
            return made_buf
        gate.set()  # the save has come while the warming was held
        buf = take(nbytes, pinned=pinned)
        taken.append(buf.data_ptr())
        return buf

    monkeypatch.setattr(pool, "take", spy)
    store.warm(state)
    store.save_async("r", 1, state).result(timeout=60)
    assert made
    assert set(taken) == set(made)  # it waited and took the warmed buffers, none new
