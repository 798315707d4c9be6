"""The commit protocol on local files: order of fsyncs and renames, modes, leftovers."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from ft_notebook.store import CheckpointStore


def _trace(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Record every fsync (by the path of its descriptor), rename and mkdir, in order."""
    events: list[tuple[str, str]] = []
    fsync, rename, mkdir = os.fsync, os.rename, os.mkdir

    def traced_fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def traced_rename(src: str, dst: str) -> None:
        events.append(("rename", f"{src} -> {dst}"))
        rename(src, dst)

    def traced_mkdir(path: str, mode: int = 0o777, **kw: object) -> None:
        events.append(("mkdir", str(path)))
        mkdir(path, mode, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", traced_fsync)
    monkeypatch.setattr(os, "rename", traced_rename)
    monkeypatch.setattr(os, "mkdir", traced_mkdir)
    return events


def test_data_is_durable_before_the_manifest_and_the_commit_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    store = CheckpointStore(root, publish_events=False)
    store.save("r", 1, {"warm": torch.ones(1)})  # folders exist: trace one steady-state save
    events = _trace(monkeypatch)
    store.save("r", 2, {"big": torch.arange(300_000.0), "small": np.arange(3)})
    monkeypatch.undo()

    step_dir = str(root / "r" / "000000000002")
    blobs_dir = str(root / "blobs")
    renames = [(i, e[1].split(" -> ")) for i, e in enumerate(events) if e[0] == "rename"]
    commit = next(i for i, (_, dst) in renames if dst == f"{step_dir}/manifest.json")
    blob_renames = [(i, src, dst) for i, (src, dst) in renames if dst.startswith(blobs_dir + "/")]
    assert len(blob_renames) == 3  # the big tensor, the small-tensor pack, the state JSON

    def first(kind: str, path: str) -> int:
        return next(i for i, e in enumerate(events) if e == (kind, path))

    for i, src, _ in blob_renames:
        assert first("fsync", src) < i < commit  # written data is on disk before it is named
    dir_sync = max(i for i, e in enumerate(events) if e == ("fsync", blobs_dir))
    assert max(i for i, _, _ in blob_renames) < dir_sync < commit  # names on disk before the commit
    manifest_tmp = renames[[i for i, _ in renames].index(commit)][1][0]
    assert first("fsync", manifest_tmp) < commit  # the manifest's bytes before its name
    assert first("mkdir", step_dir) < first("fsync", str(root / "r")) < commit  # the folder too
    assert commit < first("fsync", step_dir)  # and the commit itself is made durable


def test_folders_are_private_and_files_owner_only(tmp_path: Path) -> None:
    root = tmp_path / "new" / "store"
    CheckpointStore(root, publish_events=False).save("r", 1, {"x": torch.ones(2)})
    for folder in (root, root / "blobs", root / "r", root / "r" / "000000000001"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for f in [*(root / "blobs").iterdir(), root / "r" / "000000000001" / "manifest.json"]:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_leftovers_of_a_dead_writer_are_cleared_and_the_step_saved_again(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = CheckpointStore(root, publish_events=False)
    store.save("r", 1, {"x": torch.ones(2)})
    # What a writer killed before its commit leaves: temporary blobs and manifest.
    (root / "r" / "000000000002").mkdir(mode=0o700)
    (root / "r" / "000000000002" / ".manifest.json.dead.tmp").write_bytes(b"{partial")
    (root / "blobs" / ".0123.dead.tmp").write_bytes(b"partial blob")

    store = CheckpointStore(root, publish_events=False)  # as the restarted process does
    assert [i.step for i in store.list("r")] == [1]
    assert store.load("r").step == 1
    store.save("r", 2, {"x": torch.zeros(2)})  # no manual repair
    assert store.load("r").step == 2
    assert not (root / "r" / "000000000002" / ".manifest.json.dead.tmp").exists()
    assert not (root / "blobs" / ".0123.dead.tmp").exists()


def test_a_damaged_blob_is_rewritten_by_the_next_save_that_needs_it(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "s", publish_events=False)
    t = torch.arange(300_000.0)
    store.save("r", 1, {"t": t})
    (big,) = [p for p in (tmp_path / "s" / "blobs").iterdir() if p.stat().st_size > 1 << 20]
    big.write_bytes(big.read_bytes()[:1000])  # truncated behind the store's back
    store.save("r", 2, {"t": t})
    assert torch.equal(store.load("r", 2).state["t"], t)
