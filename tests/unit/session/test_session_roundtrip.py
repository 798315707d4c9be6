"""Snapshot and restore inside one process, through a real CheckpointStore.

A "crash" here is a fresh NotebookSession and a fresh namespace over the same store;
tests/integration/test_magics_kernel.py does it with real kernels and SIGKILL.
"""

from __future__ import annotations

import gc
import random
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _session_notebook import Notebook, user_values

from ft_notebook import _renames
from ft_notebook.exceptions import SnapshotError, UnsafeName
from ft_notebook.session import NotebookSession, _session
from ft_notebook.store import CheckpointStore


def test_values_aliases_and_views_come_back(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run("import numpy as np\nbig = np.arange(100_000, dtype=np.float64)")
    nb.run("same = big\nview = big[10:20]")
    nb.run("cfg = {'lr': 0.1, 'arr': big}\nitems = [1, 'two', (3.0,)]")
    ns, report = nb.crash_and_restore()
    assert not report.lost
    assert not report.different
    np.testing.assert_array_equal(ns["big"], np.arange(100_000, dtype=np.float64))
    assert ns["same"] is ns["big"]
    assert ns["cfg"]["arr"] is ns["big"]
    assert ns["items"] == [1, "two", (3.0,)]
    assert ns["np"] is np  # modules come back by importing them again
    ns["big"][15] = -1.0  # a write through the base shows in the view
    assert ns["view"][5] == -1.0
    assert ns["view"].base is not None


def test_unchanged_data_is_not_written_again(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run("import numpy as np\nbig = np.random.default_rng(0).random(4_000_000)\nsmall = 1")
    first = nb.written
    assert first >= 32_000_000
    nb.run("small = 2")
    assert nb.written - first < 10_000
    expected = nb.ns["big"].copy()
    nb.run("big[1_000_000] = -5.0")  # in place: one 4 MiB chunk of 32 MB changed
    assert 4 << 20 <= nb.written - first < (4 << 20) + 10_000
    ns, _ = nb.crash_and_restore()
    expected[1_000_000] = -5.0
    assert ns["small"] == 2
    np.testing.assert_array_equal(ns["big"], expected)


def test_zero_chunks_and_repeated_chunks_are_not_stored(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run("import numpy as np\nzeros = np.zeros(10_000_000)\nzeros[-1] = 1.0")
    assert nb.written < (4 << 20) + 10_000  # 80 MB of which one chunk is not zeros
    nb.run("ones = np.ones(10_000_000)")  # 19 chunks, 2 distinct (the last is shorter)
    assert nb.written < 3 * (4 << 20)
    ns, _ = nb.crash_and_restore()
    assert ns["zeros"].sum() == 1.0
    assert ns["zeros"][-1] == 1.0
    assert ns["ones"].sum() == 10_000_000


def test_model_and_optimizer_share_parameters_after_restore(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run(
        "import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(64, 64)\n"
        "opt = torch.optim.Adam(model.parameters(), lr=0.01)"
    )
    nb.run("loss = model(torch.randn(8, 64)).pow(2).mean()\nloss.backward()\nopt.step()")
    ns, report = nb.crash_and_restore()
    assert not report.lost
    params = list(ns["model"].parameters())
    assert ns["opt"].param_groups[0]["params"][0] is params[0]
    assert torch.equal(params[0], nb.ns["model"].weight)
    state = ns["opt"].state[params[0]]
    assert torch.equal(state["exp_avg"], nb.ns["opt"].state[nb.ns["model"].weight]["exp_avg"])


def test_notebook_defined_class_and_lambda_come_back(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run("class Point:\n    def __init__(self, x): self.x = x\np = Point(3)\nf = lambda v: v * 2")
    ns, _ = nb.crash_and_restore()
    assert ns["p"].x == 3
    assert ns["f"](21) == 42


def test_handles_are_stored_and_generators_replayed_with_their_random_state(
    tmp_path: Path,
) -> None:
    nb = Notebook(tmp_path)
    nb.ns["path"] = str(tmp_path / "data.txt")
    (tmp_path / "data.txt").write_text("hello\nworld\n")
    nb.run("import random, threading\nseeded = random.random()")
    nb.run("lock = threading_lock = threading.Lock()")
    nb.run("gen = (i * i for i in range(10))\nfh = open(path)\nfirst = fh.readline()")
    expected_random = nb.ns["seeded"]
    random.random()  # the global state moves on before the crash
    ns, report = nb.crash_and_restore()
    assert report.replayed == ["gen"], report  # a lock and a file are kept as handles
    assert {"fh", "lock"} <= set(report.restored)
    assert ns["threading_lock"] is ns["lock"]
    assert ns["seeded"] == expected_random
    assert isinstance(ns["lock"], type(threading.Lock()))
    assert list(ns["gen"]) == [i * i for i in range(10)]
    assert ns["fh"].readline() == "world\n"  # the replayed file is where the original was
    ns["fh"].close()
    nb.ns["fh"].close()


def test_a_replayed_generator_over_a_file_its_cell_opened_can_still_read_it(
    tmp_path: Path,
) -> None:
    nb = Notebook(tmp_path)
    nb.ns["path"] = str(tmp_path / "rows.txt")
    (tmp_path / "rows.txt").write_text("a\nb\nc\n")
    nb.run("fh = open(path)\nrows = (line.strip() for line in fh)")
    ns, report = nb.crash_and_restore()
    assert report.replayed == ["rows"], report
    own = ns["rows"].gi_frame.f_locals[".0"]  # the file the replayed cell opened
    assert not own.closed
    assert list(ns["rows"]) == ["a", "b", "c"]
    assert ns["fh"].readline() == "a\n"  # the restored handle, apart from it
    for f in (own, ns["fh"], nb.ns["fh"]):
        f.close()


def test_a_replayed_cell_gets_numpys_unseeded_global_state_back(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run("import numpy as np")  # numpy.random not imported yet: no seed anywhere
    nb.run("draws = (float(v) for v in np.random.rand(3))")  # a generator: replayed
    nb.run("label = 'x'")
    cells = {cell["count"]: cell for cell in nb.session._cells.values()}
    assert "numpy" in cells[2]["rng"]  # the state the draws came from
    assert "numpy" not in cells[3]["rng"]  # unused: a replay needs none
    ns, report = nb.crash_and_restore()
    assert report.replayed == ["draws"]
    assert list(ns["draws"]) == list(nb.ns["draws"])
    assert gc.isenabled()  # a restore leaves the collector as it found it


def test_a_replay_that_differs_is_reported_never_restored(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run("gen = iter(range(5)).__iter__()\ngen = (x for x in range(5))")
    nb.run("next(gen)")  # a later cell advanced it: replaying its cell cannot
    ns, report = nb.crash_and_restore()
    assert "gen" not in ns
    assert "gen" in report.different


def test_what_cannot_come_back_is_lost_with_a_reason(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    source = tmp_path / "feed.txt"
    source.write_text("1\n2\n")
    nb.ns["source"] = str(source)
    nb.run("import threading\nlock = threading.Lock()\nholder = [lock]")
    nb.run("lock.acquire()")  # a handle: kept as it is, held
    nb.run("squares = (i * i for i in range(9))\nbox = {'gen': squares}")
    nb.run("next(squares)")  # only a later cell advanced it: its replay cannot
    nb.run("feed = open(source)")
    nb.ns["feed"].close()
    source.unlink()  # the data is gone by the time the kernel is restored
    ns, report = nb.crash_and_restore()
    assert ns["lock"].locked()
    assert ns["holder"][0] is ns["lock"]
    assert "squares" in report.different
    assert "refers to 'squares'" in report.lost["box"]
    assert "FileNotFoundError" in report.lost["feed"]
    assert report.types == {
        "squares": "builtins.generator",
        "box": "builtins.dict",
        "feed": "_io.TextIOWrapper",
    }
    assert {"squares", "box", "feed"}.isdisjoint(ns)


def test_a_snapshot_from_other_versions_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nb = Notebook(tmp_path)
    with monkeypatch.context() as m:  # as if taken by another Python
        m.setattr(_session, "versions", lambda *a: {"python": "2.7"})
        nb.run("x = [1, 2]")
    ns = {"x": "mine"}
    with pytest.raises(SnapshotError, match=r"python 2\.7 then, 3\.\d+ now"):
        nb.session.restore(ns)
    assert ns == {"x": "mine"}


def test_a_snapshot_of_an_earlier_format_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nb = Notebook(tmp_path)
    with monkeypatch.context() as m:  # as an earlier ft_notebook wrote it
        m.setattr(_session, "FORMAT", 1)
        nb.run("x = [1, 2]")
    ns = {"x": "mine"}
    with pytest.raises(SnapshotError, match=r"in format 1 .* reads format 3"):
        nb.session.restore(ns)
    assert ns == {"x": "mine"}


def test_bad_inputs_change_nothing(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run("x = 1")
    ns = {"x": 99}
    with pytest.raises(UnsafeName):
        nb.session.restore(ns, "../etc")
    with pytest.raises(SnapshotError, match="no snapshot 'nope'"):
        nb.session.restore(ns, "nope")
    with pytest.raises(SnapshotError, match=r"holds no variables \['y'\]"):
        nb.session.restore(ns, names=["y"])
    with pytest.raises(SnapshotError, match="'latest' always means"):
        nb.session.snapshot(nb.ns, 2, name="latest")
    assert ns == {"x": 99}


def test_a_named_partial_snapshot_neither_replaces_latest_nor_breaks_the_next(
    tmp_path: Path,
) -> None:
    nb = Notebook(tmp_path)
    nb.run("a = 1\nb = [1, 2]")
    nb.session.snapshot(nb.ns, nb.count, name="only-a", names=["a"])
    nb.run("b.append(3)")  # reuses what the first snapshot stored
    rows = {r["name"]: r["variables"] for r in nb.session.list()}
    assert rows == {"only-a": ["a"], "latest": ["a", "b"]}
    ns, _ = nb.crash_and_restore()
    assert user_values(ns) == {"a": 1, "b": [1, 2, 3]}
    ns, _ = nb.crash_and_restore("only-a")
    assert user_values(ns) == {"a": 1}


def test_a_new_kernel_restores_then_snapshots_after_the_newest_step(tmp_path: Path) -> None:
    # the newest step is read at the first snapshot, not when the session starts
    nb = Notebook(tmp_path)
    nb.run("a = 1")
    nb.run("a = 2")
    newest = nb.store.list("nb")[-1].step
    fresh = NotebookSession(nb.store, "nb")
    ns: dict[str, Any] = {}
    fresh.restore(ns)
    ns["a"] = 3
    fresh.snapshot(ns, 1)
    assert nb.store.list("nb")[-1].step == newest + 1
    assert user_values(nb.crash_and_restore()[0]) == {"a": 3}


def test_a_value_coming_back_after_its_blob_was_pruned_is_stored_again(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run("import numpy as np\nx = np.arange(100_000.0)")
    nb.run("x = x + 1")  # the first x's blob is no longer needed: pruned with its snapshot
    nb.run("x = x - 1")  # the very same bytes as the first x
    ns, _ = nb.crash_and_restore()
    np.testing.assert_array_equal(ns["x"], np.arange(100_000.0))


def test_a_background_snapshot_keeps_the_values_of_its_cell(tmp_path: Path) -> None:
    """`%ft auto on` writes while the next cell runs: that cell's in-place changes must
    not reach the snapshot; a generator advanced by a later cell keeps the cell that
    made it for its replay."""
    nb = Notebook(tmp_path)
    nb.run("import numpy as np\nx = np.zeros(3 << 20)\ngen = (i for i in range(3))", False)
    nb.session.snapshot(nb.ns, nb.count)
    nb.run("x[7] = 1.0\nfirst = next(gen)", False)  # the same generator, advanced
    info = nb.session.snapshot(nb.ns, nb.count, background=True)
    nb.ns["x"][7] = 2.0  # the next cell, while the writer runs
    nb.ns["x"][(3 << 20) - 1] = 3.0
    nb.session.wait()
    assert nb.session.last_error is None
    assert info.changed == ("first", "gen", "x")
    ns, report = nb.crash_and_restore()
    assert (ns["x"][7], ns["x"][(3 << 20) - 1]) == (1.0, 0.0)
    assert ns["first"] == 0
    # replayed from the cell that made it (a fresh generator), so reported, not restored
    assert list(report.different) == ["gen"]
    assert "gen" not in ns
    assert not report.lost


def test_a_small_int_elsewhere_does_not_tie_a_list_to_a_variable(tmp_path: Path) -> None:
    """`x = 2` and a 2 inside a list are the same object in CPython; changing x must not
    make the list count as changed (nor make it depend on x)."""
    nb = Notebook(tmp_path)
    nb.run("records = [{'id': i} for i in range(20_000)]\nx = 1\nflag = True")
    before = nb.written
    nb.run("x = 2\nflag = False")
    assert nb.written - before < 2_000  # two small ints' worth, not the list again
    ns, report = nb.crash_and_restore()
    assert not report.lost
    assert ns["records"][2] == {"id": 2}
    assert (ns["x"], ns["flag"]) == (2, False)


def test_a_renamed_notebook_is_pointed_to_its_old_snapshots_and_restores_from_them(
    tmp_path: Path,
) -> None:
    old = Notebook(tmp_path)  # key "nb"
    old.run("x = [1, 2, 3]")
    old.session.wait()
    renamed = NotebookSession(old.store, "nb-renamed")
    ns: dict[str, Any] = {}
    with pytest.raises(SnapshotError, match=r"`%ft restore --from nb`") as missing:
        renamed.restore(ns)
    assert "nb (" in str(missing.value)  # listed with its age
    assert ns == {}
    with pytest.raises(UnsafeName):
        renamed.restore(ns, source="../nb")
    renamed.restore(ns, source="nb")
    assert ns["x"] == [1, 2, 3]
    renamed.snapshot(ns, 1)  # from now on under the new key
    renamed.wait()
    assert [r["name"] for r in renamed.list()] == ["latest"]


def test_a_renamed_notebooks_first_own_snapshot_drops_the_latest_it_left_behind(
    tmp_path: Path,
) -> None:
    """Retention keeps the newest state (the store stays near 1.2x the live data), and
    after a rename that is under the new key; named snapshots stay, and so does what a
    kernel still running under the old name writes after the rename."""
    store = CheckpointStore(tmp_path / "snapshots", keep=None, publish_events=False)
    before = NotebookSession(store, "draft", renames=tmp_path)
    before.snapshot({"x": np.arange(300_000.0)}, 1, name="keep")
    before.snapshot({"x": np.arange(300_000.0) + 1}, 2)
    _renames.record(tmp_path, "draft", "final")
    after = NotebookSession(store, "final", renames=tmp_path)
    ns: dict[str, Any] = {}
    after.restore(ns, source="draft")
    assert [r["name"] for r in after.list("draft")] == ["keep", "latest"]
    ns["x"] += 1
    after.snapshot(ns, 3, background=True)
    after.wait()
    assert after.last_error is None
    assert [r["name"] for r in after.list("draft")] == ["keep"]
    blobs = sum(f.stat().st_size for f in (tmp_path / "snapshots" / "blobs").iterdir())
    assert blobs < 2 * 2_400_000 + 100_000  # "keep" and the new latest, not the old latest
    kept: dict[str, Any] = {}
    NotebookSession(store, "final").restore(kept, "keep", source="draft")
    np.testing.assert_array_equal(kept["x"], np.arange(300_000.0))
    # a kernel still running under the old name, after the rename
    before.snapshot({"y": 1}, 4)
    again = NotebookSession(store, "final", renames=tmp_path)
    again.snapshot(ns, 5)
    assert [r["name"] for r in after.list("draft")] == ["keep", "latest"]


def test_what_a_renamed_notebook_restored_from_its_old_key_goes_with_its_own_first(
    tmp_path: Path,
) -> None:
    """The usual rename: the kernel, still running, keeps writing under the old key
    after the rename; a new kernel under the new name restores that and snapshots. A
    key the notebook was never renamed from is left alone, even if restored from."""
    store = CheckpointStore(tmp_path / "snapshots", keep=None, publish_events=False)
    _renames.record(tmp_path, "draft", "final")
    NotebookSession(store, "draft", renames=tmp_path).snapshot({"y": 1}, 1)  # after it
    NotebookSession(store, "other", renames=tmp_path).snapshot({"z": 1}, 1)
    new = NotebookSession(store, "final", renames=tmp_path)
    ns: dict[str, Any] = {}
    new.restore(ns, source="draft")
    new.restore(ns, source="other")  # `%ft restore --from other`: another notebook's
    assert ns == {"y": 1, "z": 1}
    new.snapshot(ns, 2)
    assert store.list("draft") == []
    assert [i.metadata["name"] for i in store.list("other")] == ["latest"]


@pytest.mark.parametrize(
    "module", ["numpy", "torch", "pandas", "cloudpickle", "xxhash", "ft_notebook", "no_such_x"]
)
def test_installed_versions_are_what_importlib_metadata_says(module: str) -> None:
    # a snapshot records these and a restore compares them: the fast reader must agree
    import importlib.metadata

    from ft_notebook.session._capture import installed_version

    try:
        expected = importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        expected = "not installed"
    assert installed_version(module) == expected
