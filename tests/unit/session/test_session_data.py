"""Data-science objects in snapshots: stored, not replayed; every in-place change
written by the next snapshot; relations between variables kept.

Values are compared with pandas' and numpy's own equality, never with ft_notebook's
fingerprints.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from _session_notebook import Notebook

FRAME = """
import numpy as np, pandas as pd
rng = np.random.default_rng(0)
n = 400_000
df = pd.DataFrame({
    'city': pd.Categorical(rng.choice(['a', 'b', 'c'], n)),
    'at': pd.Timestamp('2024-01-01', tz='UTC') + pd.to_timedelta(rng.integers(0, 10**6, n), 's'),
    'x': rng.random(n),
    'name': rng.choice(['ann', 'bob'], n),
})
"""


def test_a_frame_with_datetimes_and_categories_is_stored_not_replayed(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run(FRAME)
    info = nb.session.snapshot(nb.ns, nb.count)
    assert info.replay == ()
    ns, report = nb.crash_and_restore()
    assert report.replayed == []
    assert not report.lost
    assert _same(ns["df"], nb.ns["df"])
    assert ns["rng"].random() == nb.ns["rng"].random()  # the Generator's state, stored


def test_a_new_column_writes_that_column_not_the_frame(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run(FRAME)
    before = nb.written
    nb.run("df['y'] = df['x'] * 2")
    column = nb.ns["df"]["y"].to_numpy().nbytes
    assert column <= nb.written - before <= 1.2 * column
    ns, _ = nb.crash_and_restore()
    assert _same(ns["df"], nb.ns["df"])


@pytest.mark.parametrize(
    ("setup", "mutation"),
    [
        (FRAME, "df['z'] = 1.0"),  # an in-place column add
        (FRAME, "df.loc[df.index[:10], 'x'] = -1.0"),
        (FRAME, "df.loc[5, 'city'] = 'c'"),  # the codes of a Categorical
        ("import numpy as np\narr = np.zeros((500, 500))", "arr[3, 4] = 7.0"),
        ("import numpy as np\narr = np.arange(10_000.0)", "arr[:] = arr[::-1].copy()"),
        (
            "import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(64, 64)",
            "model.load_state_dict({k: v + 1 for k, v in model.state_dict().items()})",
        ),
        (
            "import pyarrow as pa, pandas as pd\n"
            "s = pd.Series([f'v{i}' for i in range(50_000)], dtype='string[pyarrow]')",
            "s.iloc[3] = 'changed'",
        ),
    ],
)
def test_each_in_place_change_is_written_by_the_next_snapshot(
    tmp_path: Path, setup: str, mutation: str
) -> None:
    nb = Notebook(tmp_path)
    nb.run(setup)
    nb.run(mutation, snapshot=False)
    info = nb.session.snapshot(nb.ns, nb.count)
    name = next(n for n in ("df", "arr", "model", "s") if n in nb.ns)
    assert info.changed == (name,), info
    assert info.bytes_written > 0
    ns, report = nb.crash_and_restore()
    assert not report.lost
    _assert_equal(ns[name], nb.ns[name])


def _assert_equal(got: object, want: object) -> None:
    if isinstance(want, (pd.DataFrame, pd.Series)):
        assert _same(got, want)
    elif isinstance(want, np.ndarray):
        np.testing.assert_array_equal(got, want)  # type: ignore[arg-type]
    else:
        assert isinstance(want, torch.nn.Module)
        assert isinstance(got, torch.nn.Module)
        for a, b in zip(got.state_dict().values(), want.state_dict().values(), strict=True):
            assert torch.equal(a, b)


def _same(got: object, want: pd.DataFrame | pd.Series) -> bool:
    """pandas' own equality, dtypes and index included (assert_frame_equal takes
    seconds on categorical and string columns of this size)."""
    if type(got) is not type(want) or not want.index.equals(got.index):  # type: ignore[attr-defined]
        return False
    if isinstance(want, pd.DataFrame):
        return want.dtypes.equals(got.dtypes) and want.equals(got)  # type: ignore[attr-defined]
    return want.dtype == got.dtype and want.equals(got)  # type: ignore[attr-defined]


def test_a_view_of_a_named_array_stays_a_view_after_the_base_changed(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run("import numpy as np\nbase = np.arange(100_000.0)\nwindow = base[1000:2000]")
    nb.run("base[1500] = -3.0")  # in place: the view sees it, and so must the snapshot
    ns, _ = nb.crash_and_restore()
    assert ns["window"][500] == -3.0
    assert np.shares_memory(ns["window"], ns["base"])
    ns["base"][1001] = 9.0
    assert ns["window"][1] == 9.0


def test_a_series_taken_from_a_frame_comes_back_equal_beside_it(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run(FRAME)
    nb.run("col = df['x']\nsame = df\nsub = df[df.x > 0.5]")
    ns, _ = nb.crash_and_restore()
    assert ns["same"] is ns["df"]
    assert _same(ns["col"], ns["df"]["x"])
    assert _same(ns["sub"], nb.ns["sub"])
    ns["df"].loc[0, "x"] = 5.0  # copy-on-write: what was taken before stays as it was
    assert ns["col"].iloc[0] == nb.ns["col"].iloc[0]


def test_a_replay_cannot_change_a_restored_generator(tmp_path: Path) -> None:
    # the replayed cell draws from `rng`: it must draw from a copy, not the restored one
    nb = Notebook(tmp_path)
    nb.run("import numpy as np\nrng = np.random.default_rng(3)")
    nb.run("stream = (float(v) for v in rng.random(4))")  # a generator: replayed
    nb.run("rng.random(2)")  # the notebook's rng moves on after the cell
    expected_rng = nb.ns["rng"].bit_generator.state
    ns, report = nb.crash_and_restore()
    assert report.replayed == ["stream"], report
    assert ns["rng"].bit_generator.state == expected_rng
    assert list(ns["stream"]) == list(nb.ns["stream"])


def test_a_replay_whose_input_was_rebound_since_is_reported(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run("values = [1, 2, 3]")
    nb.run("doubled = (2 * v for v in values)")
    nb.run("values = [7, 8]")  # the cell that made `doubled` saw other values
    ns, report = nb.crash_and_restore()
    assert ns["values"] == [7, 8]
    assert "doubled" in report.different, report
    assert "doubled" not in ns
