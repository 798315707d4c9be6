"""Arrays come back in the memory layout they had, not only with their values: a
Fortran-ordered matrix stays Fortran-ordered (BLAS then adds in the same order, and
a prediction made after the restore is the one made before, to the last digit), and
views of it still see its elements.

Compared with numpy's own equality and flags, and with numpy's own pickle (which keeps
Fortran order) as the reference."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from _session_notebook import Notebook

from ft_notebook.session._pickler import content_fingerprint
from ft_notebook.session._views import unkept_views

FORTRAN = """
import numpy as np
rng = np.random.default_rng(3)
X = np.asfortranarray(rng.normal(size=(20_000, 6)))  # as pandas' .values of a float frame
w = rng.normal(size=6)
head = X[:100]        # views of it, kept as views
cols = X[:, 1:4]
pred = X @ w
"""


def test_a_fortran_ordered_array_and_its_views_come_back_as_they_were(tmp_path: Path) -> None:
    nb = Notebook(tmp_path)
    nb.run(FORTRAN)
    ns, report = nb.crash_and_restore()
    assert not report.lost
    live = nb.ns
    reference = pickle.loads(pickle.dumps(live["X"]))  # numpy's pickle keeps the order
    assert reference.flags.f_contiguous
    for name in ("X", "head", "cols"):
        assert np.array_equal(ns[name], live[name]), name
        assert ns[name].strides == live[name].strides, name
    assert ns["X"].flags.f_contiguous
    assert np.shares_memory(ns["head"], ns["X"])
    assert np.shares_memory(ns["cols"], ns["X"])
    # the next cell's arithmetic: bit for bit what it was before the crash
    assert (ns["X"] @ ns["w"]).tobytes() == live["pred"].tobytes()


def test_a_content_fingerprint_reads_the_elements_not_the_layout() -> None:
    # the hash a replay is checked against: the same elements in another layout are
    # the same value, and the transpose's elements laid as the matrix's are not
    a = np.asfortranarray(np.arange(40_000.0).reshape(200, 200))
    assert content_fingerprint(a) == content_fingerprint(np.ascontiguousarray(a))
    assert content_fingerprint(a) != content_fingerprint(np.ascontiguousarray(a.T))


def test_a_view_of_a_fortran_ordered_array_is_not_said_to_come_back_a_copy(
    tmp_path: Path,
) -> None:
    # a memmap owns no memory of its own: its views are kept through the named array
    m = np.memmap(tmp_path / "m.dat", dtype="f8", mode="w+", shape=(2_000, 8), order="F")
    assert "col" not in unkept_views({"m": m, "col": m[:, 3]})


def test_a_notebook_that_binds_exec_still_restores(tmp_path: Path) -> None:
    # the frames a pickle loads in call exec and __import__ by name, in the notebook's
    # namespace: bound to a value there, they are not called
    nb = Notebook(tmp_path)
    nb.run("exec = 'shadowed'\nclass Box:\n    pass\ntally = Box()\ntally.v = [1, 2]")
    ns, report = nb.crash_and_restore()
    assert not report.lost
    assert ns["tally"].v == [1, 2]
    assert ns["exec"] == "shadowed"
