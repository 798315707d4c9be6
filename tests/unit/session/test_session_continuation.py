"""A restored namespace behaves as the one snapshotted (issue 34), in-process: the
notebook's functions bound to it, views kept, cycles stored together, objects that
pickling changes found, process-wide state put back."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from _session_notebook import Notebook

from ft_notebook.session._cycles import cycles
from ft_notebook.session._roundtrip import difference


def test_functions_closures_and_methods_are_bound_to_the_restored_namespace(
    tmp_path: Path,
) -> None:
    nb = Notebook(tmp_path)
    nb.run(
        "scale = 2\ndef f(x): return x * scale\n"
        "def make(k):\n    def g(v): return v * k + scale\n    return g\n"
        "g3 = make(3)\n"
        "class Acc:\n    def total(self): return scale\n"
        "acc = Acc()\nops = [lambda x: x + scale]\n"
        "counter = 0\ndef bump():\n    global counter\n    counter += 1\n"
    )
    ns, report = nb.crash_and_restore()
    assert not report.lost
    ns["scale"] = 10
    assert (ns["f"](1), ns["g3"](1), ns["acc"].total(), ns["ops"][0](1)) == (10, 13, 10, 11)
    ns["bump"]()
    assert ns["counter"] == 1
    assert ns["f"].__globals__ is ns


def test_a_changed_global_does_not_make_the_function_stored_again(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run("scale = [2]\ndef f(x): return x * scale[0]")
    nb.run("scale = [3]", snapshot=False)
    info = nb.session.snapshot(nb.ns, nb.count)
    assert info.changed == ("scale",)  # f holds no copy of scale any more


def test_every_kind_of_numpy_view_shares_memory_after_restore(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run(
        "import numpy as np\nA = np.arange(200000.).reshape(200, 1000)\n"
        "head, tr, strided, flat, back = A[:10], A.T, A[::2, ::3], A.ravel(), A[::-1]"
    )
    ns, _ = nb.crash_and_restore()
    for name in ("head", "tr", "strided", "flat", "back"):
        assert np.shares_memory(ns["A"], ns[name]), name
        assert np.array_equal(ns[name], nb.ns[name]), name
    ns["A"][0, 0] = -1
    assert ns["head"][0, 0] == ns["tr"][0, 0] == ns["flat"][0] == -1


def test_torch_views_and_tied_weights_share_storage_after_restore(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run(
        "import torch\nt = torch.arange(24.)\ngrid = t.view(4, 6)\npart = t[5:11]\n"
        "enc = torch.nn.Linear(4, 4)\ndec = torch.nn.Linear(4, 4)\ndec.weight = enc.weight"
    )
    ns, _ = nb.crash_and_restore()
    ns["t"][5] = -5.0
    assert ns["grid"][0, 5].item() == ns["part"][0].item() == -5.0
    assert ns["dec"].weight is ns["enc"].weight
    assert isinstance(ns["enc"].weight, torch.nn.Parameter)
    assert ns["enc"].weight.requires_grad


def test_variables_in_a_reference_cycle_come_back_together(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run(
        "class Node:\n    pass\na, b = Node(), Node()\na.other, b.other = b, a\nholder = [a]\nx = 1"
    )
    ns, report = nb.crash_and_restore()
    assert not report.lost
    assert ns["a"].other is ns["b"]
    assert ns["b"].other is ns["a"]
    assert ns["holder"][0] is ns["a"]
    nb.run("y = 2")  # an unchanged cycle is not stored again
    assert nb.session.snapshot(nb.ns, nb.count).changed == ()


def test_cycles_finds_strongly_connected_sets_only() -> None:
    refs = {"fig": ("ax",), "ax": ("fig", "x"), "x": (), "line": ("ax",), "c": ("d",), "d": ("c",)}
    assert sorted(cycles(refs)) == [("ax", "fig"), ("c", "d")]
    assert cycles({"a": ("a",), "b": ()}) == []


class _Reset:
    def __init__(self) -> None:
        self.flag = False
        self.cache = {"kept": 1}

    def __reduce__(self) -> object:
        return (_rebuilt, ())


def _rebuilt() -> _Reset:
    r = _Reset()
    r.flag = True
    return r


def test_difference_names_the_attribute_pickling_changed() -> None:
    live = _Reset()
    assert difference(live, _rebuilt()) == "`flag` False → True"
    same = _Reset()
    assert difference(live, same) == ""
    assert difference({"a": np.zeros(3)}, {"a": np.ones(3)}) == "`['a']` content differs"
    assert difference([1.0, float("nan")], [1.0, float("nan")]) == ""


def test_an_object_pickling_changes_is_replayed_if_its_cell_is_known(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run(
        "class M:\n    def __init__(self): self.t = False\n"
        "    def __reduce__(self): return (M._back, ())\n"
        "    @staticmethod\n    def _back():\n        m = M(); m.t = True; return m\n"
        "m = M()"
    )
    info = nb.session.snapshot(nb.ns, nb.count)
    assert "changes when pickled (`t` False → True)" in info.unprotected["m"]
    ns, report = nb.crash_and_restore()
    assert report.replayed == ["m"]
    assert ns["m"].t is False
    nb.ns["m"].t = "moved on"  # its replay no longer matches: the copy, reported
    nb.session.snapshot(nb.ns, nb.count)
    ns, report = nb.crash_and_restore()
    assert "m" in report.restored
    assert report.changed_by_pickling["m"].startswith("it changes when pickled: `t`")


def test_library_objects_that_pickle_faithfully_are_not_reported(tmp_path: Path) -> None:
    # their copies differ in internals only (new callback ids, weak references, a new
    # canvas): a report for each would drown the one that matters
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    nb = Notebook(tmp_path)
    nb.run(
        "import numpy as np, torch, matplotlib\nmatplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "from sklearn.linear_model import LogisticRegression\n"
        "from sklearn.pipeline import make_pipeline\n"
        "from sklearn.preprocessing import StandardScaler\n"
        "X = np.random.default_rng(0).random((60, 4)); y = (X[:, 0] > 0.5).astype(int)\n"
        "pipe = make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y)\n"
        "fig, ax = plt.subplots()\nline, = ax.plot([1, 2, 3])\n"
        "model = torch.nn.Linear(4, 2)\nopt = torch.optim.Adam(model.parameters())\n"
        "sched = torch.optim.lr_scheduler.StepLR(opt, 2)",
        snapshot=False,
    )
    info = nb.session.snapshot(nb.ns, nb.count)
    assert info.unprotected == {}


def test_random_state_and_rcparams_come_back_unless_asked_not_to(tmp_path: Path) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    nb = Notebook(tmp_path)
    random.seed(5)
    np.random.seed(6)
    torch.manual_seed(7)
    old_width = matplotlib.rcParams["lines.linewidth"]
    matplotlib.rcParams["lines.linewidth"] = 4.25
    try:
        nb.run("x = 1")
        expected = (random.random(), np.random.rand(), torch.rand(1).item())
        matplotlib.rcParams["lines.linewidth"] = old_width
        _, report = nb.crash_and_restore()
        assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
        assert matplotlib.rcParams["lines.linewidth"] == 4.25
        assert {"random", "numpy.random", "torch", "matplotlib.rcParams"} <= set(report.process)
        random.seed(8)
        report = nb.session.restore({}, process_state=False)
        assert report.process == []
        assert random.random() != expected[0]
    finally:
        matplotlib.rcParams["lines.linewidth"] = old_width


def test_a_snapshot_keeps_the_settings_it_is_given(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run("x = 1", snapshot=False)
    nb.session.snapshot(nb.ns, 1, settings={"auto": True})
    _, report = nb.crash_and_restore()
    assert report.settings == {"auto": True}


@pytest.mark.gpu
def test_the_cuda_generators_come_back_where_they_were() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from ft_notebook.session._process import capture_process, restore_process

    torch.cuda.manual_seed_all(11)
    torch.rand(1, device="cuda")  # initialised, and moved on from the seed
    state = capture_process()
    expected = torch.rand(3, device="cuda").tolist()
    torch.cuda.manual_seed_all(99)
    assert "torch.cuda" in restore_process(state)
    assert torch.rand(3, device="cuda").tolist() == expected
