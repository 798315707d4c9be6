"""The benchmarks' content hash (``ft_notebook.testing.NAMESPACE_HASHES``) is equal for
equal values and differs for different ones, whatever identities the values share."""

from __future__ import annotations

import contextlib
import io
import pickle
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
