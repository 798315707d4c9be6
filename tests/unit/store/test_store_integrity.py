"""Damage to any byte of the newest checkpoint is detected, and load falls back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ft_notebook.events import history
from ft_notebook.exceptions import CheckpointCorrupt
from ft_notebook.store import CheckpointStore


def _state(seed: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    return {
        "big": torch.randn(300_000, generator=g),  # a blob of its own
        "small": {"b": torch.randn(8, generator=g).to(torch.bfloat16), "a": np.full(3, seed)},
        "plain": {"seed": seed, "lr": 0.1 * seed},
    }


def _is_state(loaded: dict[str, Any], seed: int) -> bool:
    want = _state(seed)
    return (
        torch.equal(loaded["big"], want["big"])
        and torch.equal(loaded["small"]["b"], want["small"]["b"])
        and loaded["plain"] == want["plain"]
    )


@pytest.fixture
def newest(url: str, files: Any) -> Iterator[tuple[CheckpointStore, list[str]]]:
    """A store holding steps 1 and 2 (no data shared), and the files of step 2."""
    with CheckpointStore(url, keep=None, publish_events=False) as store:
        store.save("r", 1, _state(1))
        store.save("r", 2, _state(2))
        yield store, files.files_of("r", 2)


def _damaged(files: Any, path: str, data: bytes, store: CheckpointStore) -> None:
    original = files.read(path)
    files.write(path, data)
    try:
        loaded = store.load("r")
        assert loaded.step == 1
        assert _is_state(loaded.state, 1)
        with pytest.raises(CheckpointCorrupt, match="Step 2 of run 'r' does not verify"):
            store.verify("r", 2)
    finally:
        files.write(path, original)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_byte_flip_or_truncation_of_any_file_falls_back(
    newest: tuple[CheckpointStore, list[str]], files: Any, data: st.DataObject
) -> None:
    store, targets = newest
    path = data.draw(st.sampled_from(targets), label="file")
    raw = files.read(path)
    if data.draw(st.booleans(), label="truncate"):
        damaged = raw[: data.draw(st.integers(0, len(raw) - 1), label="keep bytes")]
    else:
        at = data.draw(st.integers(0, len(raw) - 1), label="offset")
        xor = data.draw(st.integers(1, 255), label="xor")
        damaged = raw[:at] + bytes([raw[at] ^ xor]) + raw[at + 1 :]
    _damaged(files, path, damaged, store)
    assert store.load("r").step == 2  # restored: the newest again


def test_every_byte_of_the_manifest_is_protected(
    newest: tuple[CheckpointStore, list[str]], files: Any
) -> None:
    store, targets = newest
    manifest = targets[0]
    raw = files.read(manifest)
    for at in range(len(raw)):
        for xor in (0x01, 0x20):  # a low bit, and the one between '1' and '\x11', 'a' and 'A'
            files.write(manifest, raw[:at] + bytes([raw[at] ^ xor]) + raw[at + 1 :])
            assert store.load("r").step == 1, (at, xor)
    files.write(manifest, raw)
    assert store.load("r").step == 2


def test_skipping_publishes_which_step_and_why(url: str, files: Any, unique_name: str) -> None:
    store = CheckpointStore(url)
    store.save(unique_name, 1, _state(1))
    store.save(unique_name, 2, _state(2))
    big = next(p for p in files.files_of(unique_name, 2) if len(files.read(p)) > 1 << 20)
    files.write(big, files.read(big)[:-1])

    assert store.load(unique_name).step == 1
    (event,) = [e for e in history(run=unique_name) if e.kind == "checkpoint-skipped"]
    assert event.step == 2
    assert event.data["checkpoint_step"] == 2
    assert event.data["used_step"] == 1
    assert "bytes, the manifest says" in event.data["reason"]
    assert event.data["location"] == store.url


def test_a_manifest_in_the_wrong_folder_is_invalid(
    newest: tuple[CheckpointStore, list[str]], files: Any
) -> None:
    store, _ = newest
    files.write(files.manifest("r", 3), files.read(files.manifest("r", 1)))
    assert store.load("r").step == 2
    with pytest.raises(CheckpointCorrupt, match="lies in the folder of run 'r' step 3"):
        store.verify("r", 3)
    assert [i.step for i in store.list("r")] == [1, 2]


def test_a_missing_blob_falls_back(newest: tuple[CheckpointStore, list[str]], files: Any) -> None:
    store, targets = newest
    files.fs.rm_file(targets[1])
    assert store.load("r").step == 1
    with pytest.raises(CheckpointCorrupt, match="is missing"):
        store.load("r", 2)


def test_when_nothing_verifies_load_says_so(
    newest: tuple[CheckpointStore, list[str]], files: Any
) -> None:
    store, _ = newest
    for step in (1, 2):
        manifest = files.manifest("r", step)
        files.write(manifest, files.read(manifest)[:-2])
    with pytest.raises(
        CheckpointCorrupt, match=r"No checkpoint of run 'r' verifies: step 2: .*step 1: "
    ):
        store.load("r")
    assert store.latest("r") is None
