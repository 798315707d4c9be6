"""The pickle codec: opt-in, for notebook snapshots, and only where no one else can write."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec
import numpy as np
import pytest
import torch
import xxhash
from fsspec.implementations.memory import MemoryFileSystem

from ft_notebook.exceptions import StoreError, StoreUnsafe
from ft_notebook.store import CheckpointStore
from ft_notebook.store._manifest import FileEntry, Manifest


@dataclass
class Point:  # a class "defined in the notebook"
    x: int
    y: list[int]


def test_notebook_objects_round_trip_with_pickle_allowed(url: str) -> None:
    store = CheckpointStore(url, publish_events=False)
    state = {"p": Point(1, [2, 3]), "t": torch.ones(2), "objs": np.array([{"a": 1}], dtype=object)}
    store.save("nb", 1, state, allow_pickle=True)
    out = store.load("nb", allow_pickle=True).state
    assert out["p"] == Point(1, [2, 3])
    assert torch.equal(out["t"], torch.ones(2))
    assert out["objs"][0] == {"a": 1}
    with pytest.raises(
        StoreError, match=r"holds pickled objects .* allow_pickle=True only if you trust"
    ):
        store.load("nb")


def test_what_pickle_cannot_store_is_named(url: str) -> None:
    with pytest.raises(StoreError, match=r"state\['f'\]: pickling its function failed"):
        CheckpointStore(url).save("nb", 1, {"f": lambda: 1}, allow_pickle=True)


def test_pickle_is_refused_in_a_folder_others_can_write_to(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    store = CheckpointStore(shared, publish_events=False)
    store.save("r", 1, {"t": torch.ones(2)})  # tensors and JSON are safe anywhere
    with pytest.raises(
        StoreUnsafe, match=r"Refusing to save pickled objects at .*shared: its mode drwxrwxrwx"
    ):
        store.save("nb", 1, {"p": Point(1, [])}, allow_pickle=True)
    assert store.list("nb") == []


@pytest.mark.parametrize("loosen", ["root", "step", "blob"])
def test_pickle_is_not_loaded_from_a_place_that_became_writable(
    tmp_path: Path, loosen: str
) -> None:
    root = tmp_path / "private"
    store = CheckpointStore(root, publish_events=False)
    store.save("nb", 1, {"p": Point(1, [])}, allow_pickle=True)
    target = {
        "root": root,
        "step": root / "nb" / "000000000001",
        "blob": next((root / "blobs").glob("*.pkl")),
    }[loosen]
    os.chmod(target, 0o666 if target.is_file() else 0o777)
    with pytest.raises(StoreUnsafe, match=f"Refusing to load pickled objects at {target}"):
        store.load("nb", allow_pickle=True)


def test_a_pickle_kept_in_a_file_not_named_pkl_is_not_unpickled(tmp_path: Path) -> None:
    """Who could have written a pickle is checked for the .pkl files: a forged
    checkpoint whose state points a pickle at a .bin file, in a folder anyone may
    write to, must not get past that check."""
    root = tmp_path / "s"
    store = CheckpointStore(root, publish_events=False)
    store.save("nb", 1, {"p": Point(1, [])}, allow_pickle=True)
    step, blobs = root / "nb" / f"{1:012d}", root / "blobs"
    doc = json.loads((step / "manifest.json").read_bytes())
    (pkl,) = [k for k in doc["files"] if k.endswith(".pkl")]
    hidden = pkl.replace(".pkl", ".bin")
    (blobs / pkl).rename(blobs / hidden)
    text = (blobs / doc["state"]).read_bytes().replace(pkl.encode(), hidden.encode())
    state = f"{xxhash.xxh3_128_hexdigest(text)}.json"
    (blobs / state).write_bytes(text)
    files = {k: v for k, v in doc["files"].items() if k not in (pkl, doc["state"])}
    files |= {hidden: doc["files"][pkl], state: {"size": len(text), "xxh3_128": state[:-5]}}
    entries = {k: FileEntry(v["size"], v["xxh3_128"]) for k, v in files.items()}
    forged = Manifest("nb", 1, doc["time"], doc["pinned"], doc["metadata"], state, entries)
    (step / "manifest.json").chmod(0o600)
    (step / "manifest.json").write_bytes(forged.to_bytes())
    os.chmod(root, 0o777)
    with pytest.raises(StoreError, match=r"not in a \.pkl file"):
        store.load("nb", allow_pickle=True)


def test_a_raw_checkpoint_read_to_run_code_must_be_private_even_without_pickles(
    tmp_path: Path,
) -> None:
    """A snapshot's state names cells to replay and modules to import: a caller that
    reads it to run that (allow_pickle=True) gets it only from a private place."""
    store = CheckpointStore(tmp_path / "s", keep=None, publish_events=False)
    store.save_raw("nb", 1, {"cells": {"1": "import os; os.system('...')"}}, {})
    os.chmod(tmp_path / "s", 0o777)
    try:
        assert store.open_raw("nb").state["cells"]  # only read: fine
        with pytest.raises(StoreUnsafe, match="lets other users write to it"):
            store.open_raw("nb", allow_pickle=True)
    finally:
        os.chmod(tmp_path / "s", 0o700)


class RemoteFS(MemoryFileSystem):
    """Stands for an object store: not local, not this process's memory."""

    protocol = "ftremote"


@pytest.fixture
def remote() -> Iterator[str]:
    fsspec.register_implementation("ftremote", RemoteFS, clobber=True)
    url = f"ftremote://bucket-{uuid.uuid4().hex}"
    yield url
    RemoteFS().rm(url, recursive=True)


def test_pickle_at_a_remote_location_needs_trust(remote: str) -> None:
    with pytest.raises(StoreUnsafe, match="trust=True"):
        CheckpointStore(remote).save("nb", 1, {"p": Point(1, [])}, allow_pickle=True)
    CheckpointStore(remote).save("plain", 1, {"t": torch.ones(1)})  # no pickle: fine

    trusted = CheckpointStore(remote, trust=True, publish_events=False)
    trusted.save("nb", 1, {"p": Point(1, [])}, allow_pickle=True)
    assert trusted.load("nb", allow_pickle=True).state["p"] == Point(1, [])
    with pytest.raises(StoreUnsafe, match="trust=True"):
        CheckpointStore(remote).load("nb", allow_pickle=True)
