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
