"""Content-addressed blobs, retention, pinning and collection."""

from __future__ import annotations

from typing import Any

import dask.config
import pytest
import torch

from ft_notebook.config import reload_config
from ft_notebook.store import CheckpointStore


def _blob_of(files: Any, run: str, step: int, nbytes: int) -> str:
    (path,) = [p for p in files.files_of(run, step)[1:] if len(files.read(p)) == nbytes]
    return str(path)


def test_an_unchanged_tensor_is_written_once_and_outlives_the_first_checkpoint(
    store: CheckpointStore, files: Any
) -> None:
    frozen = torch.randn(300_000)  # 1.2 MB: a blob of its own
    store.save("r", 1, {"frozen": frozen, "w": torch.zeros(300_000, dtype=torch.float64)})
    shared = _blob_of(files, "r", 1, 1_200_080)
    written = files.identity(shared)

    store.save("r", 2, {"frozen": frozen.clone(), "w": torch.ones(300_000, dtype=torch.float64)})
    assert _blob_of(files, "r", 2, 1_200_080) == shared
    assert files.identity(shared) == written  # not written again
    assert len(files.blobs()) == 5  # frozen once, w twice, a state file per checkpoint

    store.delete("r", 1)
    assert files.exists(shared)
    assert files.identity(shared) == written
    assert torch.equal(store.load("r").state["frozen"], frozen)
    assert store.verify("r", 2).step == 2

    store.delete("r", 2)
    assert files.blobs() == []  # nothing references anything: all collected


def test_blobs_are_shared_across_runs(store: CheckpointStore, files: Any) -> None:
    base = torch.randn(300_000)
    store.save("a", 1, {"base": base})
    store.save("b", 1, {"base": base})
    store.delete("a", 1)
    assert torch.equal(store.load("b").state["base"], base)


def test_retention_keeps_the_newest_and_collects_the_rest(url: str, files: Any) -> None:
    store = CheckpointStore(url, keep=2, publish_events=False)
    for step in range(1, 6):
        store.save("r", step, {"w": torch.full((300_000,), float(step))})
    assert [i.step for i in store.list("r")] == [4, 5]
    referenced = {p.rsplit("/", 1)[1] for s in (4, 5) for p in files.files_of("r", s)[1:]}
    assert set(files.blobs()) == referenced


def test_pinned_checkpoints_survive_retention(url: str) -> None:
    store = CheckpointStore(url, keep=1, publish_events=False)
    store.save("r", 1, {"x": 1}, pin=True)
    for step in (2, 3, 4):
        store.save("r", step, {"x": step})
    assert [(i.step, i.pinned) for i in store.list("r")] == [(1, True), (4, False)]
    store.delete("r", 1)  # an explicit delete takes pinned ones too
    assert [i.step for i in store.list("r")] == [4]


def test_a_damaged_newer_checkpoint_never_costs_the_last_good_one(url: str, files: Any) -> None:
    CheckpointStore(url, keep=2, publish_events=False).save(
        "r", 1, {"w": torch.full((300_000,), 1.0)}
    )
    CheckpointStore(url, keep=2, publish_events=False).save(
        "r", 2, {"w": torch.full((300_000,), 2.0)}
    )
    big = _blob_of(files, "r", 2, 1_200_080)
    files.write(big, files.read(big)[:-8])  # step 2 rots on disk

    store = CheckpointStore(url, keep=2, publish_events=False)  # a new process: nothing cached
    store.save("r", 3, {"w": torch.full((300_000,), 3.0)})
    assert [i.step for i in store.list("r")] == [1, 2, 3]  # 2 does not count towards keep=2

    store.save("r", 4, {"w": torch.full((300_000,), 4.0)})
    assert [i.step for i in store.list("r")] == [3, 4]
    files.write(files.manifest("r", 4), b"{}")
    assert store.load("r").step == 3


def test_keep_none_keeps_everything(url: str) -> None:
    store = CheckpointStore(url, keep=None, publish_events=False)
    for step in range(6):
        store.save("r", step, {"x": step})
    assert [i.step for i in store.list("r")] == list(range(6))


@pytest.mark.parametrize("configured", [2, None])
def test_keep_left_out_is_the_configured_store_keep(url: str, configured: int | None) -> None:
    # the store repeats no default of its own: ft-notebook.train.store-keep decides,
    # whatever it is (the shipped value is 3), and null keeps all there too
    try:
        with dask.config.set({"ft-notebook.train.store-keep": configured}):
            reload_config()
            store = CheckpointStore(url, publish_events=False)
    finally:
        reload_config()
    assert store.keep == configured
    for step in range(5):
        store.save("r", step, {"x": step})
    kept = [i.step for i in store.list("r")]
    assert kept == ([3, 4] if configured == 2 else list(range(5)))


def test_blobs_named_by_a_damaged_manifest_are_not_collected(url: str, files: Any) -> None:
    store = CheckpointStore(url, keep=None, publish_events=False)
    store.save("r", 1, {"w": torch.full((300_000,), 1.0)})
    store.save("r", 2, {"w": torch.full((300_000,), 2.0)})
    second = files.files_of("r", 2)
    files.write(second[0], files.read(second[0])[:-40])  # no longer valid JSON
    store.delete("r", 1)  # collects what nothing names
    assert all(files.exists(p) for p in second[1:])
    files.fs.rm_file(second[0])  # once no manifest names them, they go
    store.save("r", 3, {"w": torch.full((300_000,), 3.0)})
    store.delete("r", 3)
    assert files.blobs() == []
