"""The robust aggregators against their definitions, and against ByzFL.

ByzFL (PyPI ``byzfl``, installed by ``make install`` without its dependencies: they
would pull torchvision and a CUDA torch) is the independent reference: on the same
random inputs, with its parameters passed explicitly, every rule both implement must
give the same aggregate within 1e-5 relative. Its package ``__init__`` imports its
federated-learning framework (torchvision); only its aggregator modules are loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from typing import Any

import numpy as np
import pytest
import torch

from ft_notebook.exceptions import AggregationError
from ft_notebook.robust import RULES, aggregator, attack


def _byzfl() -> Any:
    spec = importlib.util.find_spec("byzfl")
    assert spec is not None, "ByzFL is missing: `make install` installs it"
    if "byzfl" not in sys.modules:  # the package, its __init__ not run
        sys.modules["byzfl"] = importlib.util.module_from_spec(spec)
    return importlib.import_module("byzfl.aggregators")


def _inputs(n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    honest = torch.randn(n, d, generator=g, dtype=torch.float64)
    honest[-1] *= 25  # one far row, so that the rules differ from the mean
    return honest


def _close(ours: torch.Tensor, theirs: Any) -> None:
    reference = torch.as_tensor(np.asarray(theirs), dtype=torch.float64)
    scale = reference.abs().max().clamp_min(1e-12)
    assert ((ours.double() - reference).abs().max() / scale).item() < 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("n", "f"), [(5, 1), (7, 2), (9, 3)])
def test_the_same_aggregates_as_byzfl(seed: int, n: int, f: int) -> None:
    byzfl = _byzfl()
    x = _inputs(n, 64, seed)
    rows = x.numpy()  # ByzFL's numpy path (its torch median returns a tuple)
    pairs = [
        (aggregator("mean"), byzfl.Average()),
        (aggregator("median", f), byzfl.Median()),
        (aggregator("trimmed-mean", f), byzfl.TrMean(f=f)),
        (
            aggregator("geometric-median", f, nu=0.1, iterations=3, start="zeros"),
            byzfl.GeometricMedian(nu=0.1, T=3),
        ),
        (aggregator("multi-krum", f), byzfl.MultiKrum(f=f)),
        (
            aggregator("centered-clipping", f, tau=1.0, iterations=3),
            byzfl.CenteredClipping(L=3, tau=1.0),
        ),
        (aggregator("nnm+mean", f), _compose(byzfl.NNM(f=f), byzfl.Average())),
        (aggregator("nnm+median", f), _compose(byzfl.NNM(f=f), byzfl.Median())),
    ]
    if n >= 2 * f + 3:
        pairs.append((aggregator("krum", f), byzfl.Krum(f=f)))
    for ours, theirs in pairs:
        _close(ours(x), theirs(rows))


def _compose(first: Any, second: Any) -> Any:
    return lambda rows: second(first(rows))


def test_centered_clipping_carries_its_centre_like_byzfl() -> None:
    byzfl = _byzfl()
    ours = aggregator("centered-clipping", 1, tau=0.5, iterations=2)
    theirs = byzfl.CenteredClipping(L=2, tau=0.5)
    for step in range(4):
        x = _inputs(5, 32, seed=10 + step)
        _close(ours(x), theirs(x.numpy()))


def test_each_rule_against_its_definition_on_hand_made_rows() -> None:
    x = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0], [100.0, -100.0]])
    assert aggregator("mean")(x).tolist() == [22.0, 0.0]
    assert aggregator("median", 2)(x).tolist() == [3.0, 20.0]
    assert aggregator("median", 1)(x[:4]).tolist() == [2.5, 25.0]  # even n: the middle two
    assert aggregator("trimmed-mean", 1)(x).tolist() == [3.0, 20.0]  # (2+3+4)/3, (10+20+30)/3
    # Krum (f=1): each row's mean squared distance to its 3 nearest others; row 1 and
    # row 2 tie at the lowest score, and the lower index wins
    assert aggregator("krum", 1)(x).tolist() == [2.0, 20.0]
    assert aggregator("multi-krum", 1, m=2)(x).tolist() == [2.5, 25.0]
    assert aggregator("multi-krum", 1)(x).tolist() == [2.5, 25.0]  # m = n - f = 4: rows 0-3


def test_centered_clipping_by_default_clips_at_the_median_distance() -> None:
    torch.manual_seed(3)
    good = torch.randn(6, 50) * 0.1 + 1.0
    rows = torch.cat([good, torch.full((2, 50), -30.0)])  # 2 of 8 far off, norm ~ 212
    auto = aggregator("centered-clipping", 2, iterations=3)(rows)
    assert torch.allclose(auto, good.mean(0), atol=0.35), auto.mean()
    # a fixed radius far above the gradients' scale clips nothing: the mean
    fixed = aggregator("centered-clipping", 2, tau=1000.0, iterations=3)(rows)
    assert torch.allclose(fixed, rows.mean(0), atol=1e-4)


def test_ties_go_to_the_lowest_index() -> None:
    x = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, -1.0], [-1.0, 0.0], [0.0, 0.0]])
    # rows 0-3 are at the same distances from the others: row 4 (the centre) wins Krum
    assert aggregator("krum", 1)(x).tolist() == [0.0, 0.0]
    same = torch.ones(5, 3)
    assert aggregator("krum", 1)(same).tolist() == [1.0, 1.0, 1.0]


def test_krum_s_distances_are_float64_exact_on_long_rows_with_close_and_equal_ones() -> None:
    """Krum and NNM rank rows by their distances: at d = 1e6, float32 ``cdist`` is
    5e-4 off, enough to reorder close scores. Ours must agree with float64 ``cdist``,
    with an equal pair exactly at 0 and a non-finite row infinitely far."""
    from ft_notebook.robust._aggregators import _squared_distances

    g = torch.Generator().manual_seed(7)
    rows = torch.randn(6, 1_000_000, generator=g)
    rows[1] = rows[0] + 1e-3 * torch.randn(1_000_000, generator=g)  # close
    rows[3] = rows[2]  # equal
    exact = torch.cdist(rows.double(), rows.double()).pow(2)
    ours = _squared_distances(rows)
    assert ours.dtype == torch.float64
    assert ours[2, 3] == 0.0
    assert ours[3, 2] == 0.0
    off = ((ours - exact).abs() / exact.clamp_min(1e-300)).fill_diagonal_(0.0)
    off[2, 3] = off[3, 2] = 0.0
    assert off.max().item() < 1e-6
    rows[4, 17] = torch.nan
    broken = _squared_distances(rows)
    assert torch.isinf(broken[4, [0, 1, 2, 3, 5]]).all()
    assert broken[4, 4] == 0.0
    assert torch.isfinite(broken[[0, 1, 2, 3, 5]][:, [0, 1, 2, 3, 5]]).all()


def test_the_geometric_median_resists_one_far_row() -> None:
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1e6, 1e6]])
    centre = aggregator("geometric-median", 1, iterations=50, nu=1e-6)(x)
    # the far row pulls with the force of one unit vector, whatever its distance: the
    # median stays inside the square of the others, where the 4 unit vectors to the
    # corners balance it (at t(1, 1) with t = 1 - 1/sqrt(6) + ..., here 0.789)
    assert ((centre > 0.5) & (centre < 1.0)).all(), centre
    moved = x.clone()
    moved[4] *= 1000  # a thousand times farther: the median does not move
    far = aggregator("geometric-median", 1, iterations=50, nu=1e-6)(moved)
    assert torch.allclose(far, centre, atol=1e-3)
    assert aggregator("mean")(x).min() > 1e5


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("rule", [r for r in RULES if r != "mean"])
def test_a_non_finite_row_moves_no_robust_rule(rule: str, bad: float) -> None:
    torch.manual_seed(0)
    x = torch.randn(7, 16)
    poisoned = x.clone()
    poisoned[3, 5] = bad
    agg = aggregator(rule, 1)
    got = agg(poisoned)
    assert torch.isfinite(got).all(), (rule, got)
    others = x[[0, 1, 2, 4, 5, 6]]
    if rule in ("krum", "geometric-median"):
        # the poisoned row is never chosen, nor weighed: the same as without it
        assert torch.allclose(got, aggregator(rule, 1)(others), atol=1e-5)
    if rule == "multi-krum":  # the m = n - f = 6 best rows: all but the poisoned one
        assert torch.allclose(got, others.mean(dim=0), atol=1e-6)


@pytest.mark.parametrize("path", ["exchanges", "sort"])
def test_the_trim_keeps_what_a_column_sort_keeps(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trimmed mean and the median drop the same values as sorting each column
    would (NaN counted as +inf), by compare-exchanges or by a sort, on random n and
    k with ties, NaN and infinities in the rows."""
    from ft_notebook.robust import _aggregators

    monkeypatch.setattr(_aggregators, "_MOST_EXCHANGES", 10**6 if path == "exchanges" else -1)
    rng = np.random.default_rng(7)
    for _ in range(60):
        n = int(rng.integers(3, 13))
        f = int(rng.integers(0, (n - 1) // 2 + 1))
        x = torch.from_numpy(rng.integers(-3, 4, size=(n, 40)).astype(np.float32))  # ties
        for _bad in range(int(rng.integers(0, f + 1))):  # at most f bad values per column
            row, col = int(rng.integers(n)), int(rng.integers(40))
            x[row, col] = float(rng.choice([np.nan, np.inf, -np.inf]))
        ordered = x.nan_to_num(nan=torch.inf).sort(dim=0).values
        want = ordered[f : n - f].mean(dim=0)
        got = aggregator("trimmed-mean", f)(x)
        assert torch.equal(got, want) or torch.allclose(got, want, atol=1e-6, equal_nan=True), (
            n,
            f,
            got - want,
        )
        median = ordered[(n - 1) // 2 : n // 2 + 1].mean(dim=0)
        assert torch.allclose(aggregator("median", f)(x), median, atol=1e-6, equal_nan=True)


def test_the_mean_takes_a_nan_in() -> None:
    x = torch.randn(4, 3)
    x[0, 0] = float("nan")
    assert torch.isnan(aggregator("mean")(x)[0])


@pytest.mark.parametrize(
    ("rule", "n", "f", "needs"),
    [
        ("krum", 4, 1, "n >= 2f + 3"),
        ("krum", 6, 2, "n >= 2f + 3"),
        ("multi-krum", 4, 1, "n >= 2f + 3"),
        ("median", 4, 2, "f < n/2"),
        ("trimmed-mean", 2, 1, "f < n/2"),
        ("geometric-median", 6, 3, "f < n/2"),
        ("centered-clipping", 2, 1, "f < n/2"),
        ("nnm+krum", 4, 1, "n >= 2f + 3"),
    ],
)
def test_a_violated_condition_is_an_error_naming_n_and_f(
    rule: str, n: int, f: int, needs: str
) -> None:
    pattern = rf"f={f} needs {re.escape(needs)}.*n={n} workers"
    with pytest.raises(AggregationError, match=pattern) as e:
        aggregator(rule, f)(torch.randn(n, 8))
    assert "Add workers, lower f" in str(e.value)


def test_krum_just_meets_its_condition_at_2f_plus_3() -> None:
    for f in range(4):
        aggregator("krum", f)(torch.randn(2 * f + 3, 4))


def test_bad_parameters_and_names_are_refused() -> None:
    with pytest.raises(AggregationError, match="unknown aggregator 'medain'"):
        aggregator("medain")
    with pytest.raises(AggregationError, match="must be 0 or more"):
        aggregator("median", -1)
    with pytest.raises(AggregationError, match="averages at most n - f = 4"):
        aggregator("multi-krum", 1, m=5)(torch.randn(5, 2))
    with pytest.raises(AggregationError, match="tau > 0"):
        aggregator("centered-clipping", 1, tau=0.0)
    with pytest.raises(AggregationError, match=r"an \(n, d\) tensor"):
        aggregator("median")(torch.randn(8))


def test_the_attacks_do_what_they_say() -> None:
    torch.manual_seed(1)
    honest = torch.randn(6, 100)
    own = honest[0]
    assert torch.equal(attack("sign-flip", 8, 2)(honest, own), -4 * own)
    assert torch.equal(attack("sign-flip", 8, 2, scale=1.0)(honest, own), -own)
    assert torch.equal(attack("scaled", 8, 2, factor=3.0)(honest, own), own * 3)
    ipm = attack("ipm", 8, 2, epsilon=0.5)(honest, own)
    assert torch.dot(ipm, honest.mean(0)) < 0
    a = attack("alie", 8, 2)(honest, own)
    # within a standard deviation of the mean per coordinate: hard to tell from honest
    assert ((a - honest.mean(0)).abs() <= honest.std(0) * 1.01).all()
    noisy = attack("gaussian", 8, 2, std=200.0, seed=3)(honest, own)
    assert 150 < noisy.std().item() < 250
    flipped = attack("bit-flip", 8, 2)(honest, own)
    assert (flipped != own).sum() == (100 + 96) // 97
    assert torch.isnan(attack("nan", 8, 2)(honest, own)).all()
    with pytest.raises(AggregationError, match="data attack"):
        attack("label-flip", 8, 2)


def test_median_holds_where_the_mean_is_dragged_by_sign_flips() -> None:
    torch.manual_seed(2)
    true = torch.randn(1000)
    honest = true + 0.1 * torch.randn(6, 1000)
    bad = torch.stack([attack("scaled", 8, 2, factor=-20.0)(honest, honest[i]) for i in range(2)])
    rows = torch.cat([honest, bad])
    for rule in ("median", "trimmed-mean", "geometric-median", "krum", "multi-krum"):
        got = aggregator(rule, 2)(rows)
        assert torch.nn.functional.cosine_similarity(got, true, dim=0) > 0.9, rule
    assert torch.nn.functional.cosine_similarity(aggregator("mean")(rows), true, dim=0) < 0
