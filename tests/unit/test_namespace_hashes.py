"""The benchmarks' content hash (``ft_notebook.testing.NAMESPACE_HASHES``) is equal for
equal values and differs for different ones, whatever identities the values share."""

from __future__ import annotations

import contextlib
import io
import pickle
import types
from typing import Any

import numpy as np
import scipy.stats

from ft_notebook.testing import NAMESPACE_HASHES, parse_hashes


def _hashes(**variables: Any) -> dict[str, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(NAMESPACE_HASHES, dict(variables))
    return parse_hashes(out.getvalue())


class Prediction:  # statsmodels' PredictionResults: keeps scipy.stats.t
    def __init__(self) -> None:
        self.dist, self.df = scipy.stats.t, 4


def test_a_random_state_is_hashed_by_the_state_it_draws_from() -> None:
    # as numpy's global generator in two kernels once ft put its state back: the same
    # state, another seed sequence (which no draw uses), so another pickle, which the
    # old rule hashed
    live, copy = np.random.RandomState(), np.random.RandomState()
    copy.set_state(live.get_state())
    assert pickle.dumps(copy) != pickle.dumps(live)
    pred, pred_copy = Prediction(), pickle.loads(pickle.dumps(Prediction()))
    same = _hashes(rs=live, pred=pred)
    assert _hashes(rs=copy, pred=pred_copy) == same
    copy.rand()
    pred_copy.dist.random_state.rand()
    drawn = _hashes(rs=copy, pred=pred_copy)
    assert drawn["rs"] != same["rs"]
    assert drawn["pred"] != same["pred"]
    assert drawn["rs"].startswith("nprs:")


class Distribution:  # scipy's rv_generic: keeps its own bound methods in np.vectorize
    def __init__(self, random_state: np.random.RandomState) -> None:
        self._random_state = random_state
        self._cdfvec = np.vectorize(self._cdf_single)
        # a method whose function is an np.vectorize object: count_hurdle's models hold one
        self._ppf = types.MethodType(np.vectorize(lambda _, q: q), self)

    def _cdf_single(self, k: float) -> float:
        return k


def _same_state(live: np.random.RandomState) -> np.random.RandomState:
    """numpy's global generator in the restored kernel: the state put back, another seed
    sequence (so another pickle)."""
    copy = np.random.RandomState()
    copy.set_state(live.get_state())
    return copy


def test_a_bound_method_is_hashed_by_its_function_and_its_object_not_its_pickle() -> None:
    # count_hurdle's res_h: statsmodels' models keep scipy.stats.poisson, whose
    # _cdfvec.pyfunc is its own bound method; the old rule hashed the method's pickle,
    # which holds the distribution's generator's pickle: other bytes in the new kernel
    live = Distribution(np.random.RandomState())
    copy = Distribution(_same_state(live._random_state))
    assert pickle.dumps(copy._cdf_single) != pickle.dumps(live._cdf_single)
    same = _hashes(dist=live, method=live._cdf_single)
    assert _hashes(dist=copy, method=copy._cdf_single) == same
    assert same["method"].startswith("bm:")
    copy._random_state.rand()
    drawn = _hashes(dist=copy, method=copy._cdf_single)
    assert drawn["dist"] != same["dist"]
    assert drawn["method"] != same["method"]


class Node:
    def __init__(self, child: Any) -> None:
        self.child = child


def test_what_lies_past_the_depth_limit_is_not_hashed_by_its_pickle() -> None:
    # statespace_concentrated_scale's res_ar: statsmodels' results reach pandas' and
    # the models' internals seven objects down, where the old rule hashed a dict or an
    # object by its pickle: other bytes for equal values (a generator's seed sequence,
    # pandas' caches), so an equal restore read as different
    live_rs = np.random.RandomState()
    copy_rs = _same_state(live_rs)

    def chain(rs: np.random.RandomState, tag: int) -> Node:
        node = Node({"rs": rs})
        for _ in range(6):
            node = Node(node)
        return Node({"tag": tag, "deep": node})

    same = _hashes(model=chain(live_rs, 1))
    assert _hashes(model=chain(copy_rs, 1)) == same
    # what is within the depth limit still counts
    assert _hashes(model=chain(copy_rs, 2)) != same


def test_an_object_met_again_inside_itself_is_a_cycle_not_a_pickle() -> None:
    # the old rule walked a cycle down to the depth limit and hashed what it met there
    # by its pickle, generators' seeds included
    live, copy = Node(np.random.RandomState()), Node(None)
    copy.child = _same_state(live.child)
    live.me, copy.me = live, copy  # type: ignore[attr-defined]
    same = _hashes(node=live)
    assert _hashes(node=copy) == same
    copy.child.rand()
    assert _hashes(node=copy) != same
