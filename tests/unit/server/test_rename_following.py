"""The server's half of renamed notebooks keeping their snapshots, without a server:
a real kernel manager over a real folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from jupyter_server.services.kernels.kernelmanager import MappingKernelManager

from ft_notebook import _renames
from ft_notebook._notebook_key import notebook_key
from ft_notebook.server._renames import follow_rename
from ft_notebook.store import CheckpointStore

pytestmark = pytest.mark.unit


def test_a_rename_before_any_snapshot_records_nothing_and_makes_no_folder(
    tmp_path: Path, isolated_data_dir: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "b.ipynb").write_text("{}")  # renamed from a.ipynb
    kernels = MappingKernelManager(root_dir=str(root))
    assert follow_rename(kernels, "a.ipynb", "b.ipynb") == []
    assert not (isolated_data_dir / "snapshots").exists()
    assert not (isolated_data_dir / _renames.FILE).exists()


def test_only_notebooks_with_snapshots_are_followed_out_of_a_renamed_folder(
    tmp_path: Path, isolated_data_dir: Path
) -> None:
    root = tmp_path / "root"
    (root / "new" / "deep").mkdir(parents=True)
    for name in ("new/kept.ipynb", "new/deep/other.ipynb", "new/data.csv"):
        (root / name).write_text("{}")
    kept = notebook_key(os.path.join(root, "old", "kept.ipynb"))
    with CheckpointStore(isolated_data_dir / "snapshots", keep=None) as store:
        store.save(kept, 1, {"x": 1}, metadata={"name": "latest"})
    kernels = MappingKernelManager(root_dir=str(root))
    new = notebook_key(os.path.join(root, "new", "kept.ipynb"))
    assert follow_rename(kernels, "old", "new") == [(kept, new)]
    assert _renames.renamed_from(isolated_data_dir, new) == [kept]


def test_renames_followed_at_the_same_time_are_all_recorded(
    tmp_path: Path, isolated_data_dir: Path
) -> None:
    """The server follows each rename on a worker thread; none may drop another's."""
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path / "root"
    root.mkdir()
    olds = {}
    with CheckpointStore(isolated_data_dir / "snapshots", keep=None) as store:
        for i in range(12):
            (root / f"new-{i}.ipynb").write_text("{}")
            olds[i] = notebook_key(os.path.join(root, f"old-{i}.ipynb"))
            store.save(olds[i], 1, {"x": i}, metadata={"name": "latest"})
    kernels = MappingKernelManager(root_dir=str(root))
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda i: follow_rename(kernels, f"old-{i}.ipynb", f"new-{i}.ipynb"), olds))
    for i, old in olds.items():
        new = notebook_key(os.path.join(root, f"new-{i}.ipynb"))
        assert _renames.renamed_from(isolated_data_dir, new) == [old]
