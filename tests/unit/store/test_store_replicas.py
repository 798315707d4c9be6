"""Replicas: every checkpoint committed to each location; reads fall back to one that verifies."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch

from ft_notebook.events import history
from ft_notebook.exceptions import CheckpointCorrupt, StoreError
from ft_notebook.store import CheckpointStore


@pytest.fixture(params=["local", "memory"])
def replica(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "local":
        yield str(tmp_path / "replica")
        return
    url = f"memory://ft-replica-{uuid.uuid4().hex}"
    yield url
    fsspec.filesystem("memory").rm(url, recursive=True)


def test_every_checkpoint_is_committed_to_each_location(url: str, replica: str) -> None:
    store = CheckpointStore(url, replicas=[replica])
    assert store.replicas == (replica,)
    store.save("r", 1, {"w": torch.randn(300_000)})
    for where in (url, replica):
        alone = CheckpointStore(where)
        assert alone.verify("r", 1).step == 1


def test_a_damaged_primary_is_read_from_the_replica(
    url: str, replica: str, unique_name: str, files_at: Any
) -> None:
    store = CheckpointStore(url, replicas=[replica])
    w = torch.randn(300_000)
    store.save(unique_name, 1, {"w": w})
    primary = files_at(url)
    big = next(p for p in primary.files_of(unique_name, 1) if len(primary.read(p)) > 1 << 20)
    primary.write(big, b"\0" + primary.read(big)[1:])

    loaded = store.load(unique_name)
    assert loaded.step == 1
    assert loaded.location == replica
    assert torch.equal(loaded.state["w"], w)
    assert store.verify(unique_name, 1).location == replica
    assert not [e for e in history(run=unique_name) if e.kind == "checkpoint-skipped"]

    primary.fs.rm_file(primary.manifest(unique_name, 1))  # gone from the primary altogether
    assert store.load(unique_name).location == replica
    assert [i.step for i in store.list(unique_name)] == [1]


def test_a_step_damaged_everywhere_says_where_and_why(
    url: str, replica: str, files_at: Any
) -> None:
    store = CheckpointStore(url, replicas=[replica], publish_events=False)
    store.save("r", 1, {"x": 1})
    for where in (url, replica):
        f = files_at(where)
        f.write(f.manifest("r", 1), f.read(f.manifest("r", 1)).replace(b'"step": 1', b'"step": 2'))
    with pytest.raises(CheckpointCorrupt) as caught:
        store.load("r", 1)
    assert str(caught.value).count("manifest.json's own hash does not match") == 2
    assert url in str(caught.value)
    assert replica in str(caught.value)


def test_a_failing_replica_fails_the_save_and_says_where_it_is_committed(
    url: str, replica: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(url, replicas=[replica], publish_events=False)

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device", f"{replica}/blobs/x")

    monkeypatch.setattr(store._locations[1], "write_blobs", full)
    with pytest.raises(StoreError, match=f"It was committed to {url}, which load\\(\\) reads"):
        store.save("r", 1, {"x": 1})
    assert store.load("r").location == url


def test_an_unreachable_primary_is_read_around(
    url: str, replica: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(url, replicas=[replica], publish_events=False)
    store.save("r", 1, {"x": 1})

    def unreachable(*args: Any) -> Any:
        raise ConnectionError(111, "Connection refused")

    for name in ("steps", "read_manifest", "read_blob", "runs"):
        monkeypatch.setattr(store._locations[0], name, unreachable)
    assert store.load("r").location == replica
    assert [i.step for i in store.list("r")] == [1]
    assert store.runs() == ["r"]
    monkeypatch.setattr(store._locations[1], "steps", unreachable)
    with pytest.raises(StoreError, match=r"Cannot list run 'r': .*Connection refused.*reachable"):
        store.load("r")
