"""The aggregation rules, each a small class over the stacked gradients of one step.

Every rule takes an ``(n, d)`` tensor (one row per worker) and returns the ``d``-vector
to apply, the same on every rank given the same rows (no randomness; ties go to the
lowest worker index). Each checks its condition on ``n`` and ``f`` when called:
the number of workers can fall during a run, and a rule that no longer bounds the
bad workers' influence must say so, never quietly become something else.

A NaN counts as +inf for the coordinate-wise rules (trimmed before any finite value),
and a row with a NaN or an infinity lies infinitely far from the others for the
distance-based ones (never selected, no weight). The mean has no such defence: it is
the baseline that fails.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from ft_notebook.exceptions import AggregationError


class Aggregator(ABC):
    """An aggregation rule tolerating ``f`` Byzantine workers among ``n``."""

    name: str = ""
    condition = ""  # as the error states it

    def __init__(self, f: int = 0) -> None:
        if not isinstance(f, int) or isinstance(f, bool) or f < 0:
            raise AggregationError(
                f"f (the Byzantine workers to tolerate) must be 0 or more, got {f!r}."
            )
        self.f = f

    def __call__(self, grads: torch.Tensor) -> torch.Tensor:
        if grads.dim() != 2 or grads.shape[0] == 0:
            raise AggregationError(
                f"{self.name} aggregates an (n, d) tensor of n >= 1 workers' gradients, "
                f"got shape {tuple(grads.shape)}."
            )
        self.check(grads.shape[0])
        return self.aggregate(grads)

    def holds(self, n: int) -> bool:
        """Whether the rule bounds ``f`` bad workers among ``n``."""
        return True

    def check(self, n: int) -> None:
        if not self.holds(n):
            raise AggregationError(
                f"{self.name} with f={self.f} needs {self.condition}, but there are n={n} "
                f"workers. Add workers, lower f, or choose a rule with a weaker condition "
                f"(median or trimmed mean need only f < n/2)."
            )

    @abstractmethod
    def aggregate(self, grads: torch.Tensor) -> torch.Tensor: ...

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({params})"

    def params(self) -> dict[str, Any]:
        return {"f": self.f}


class Mean(Aggregator):
    """The plain average: what all-reduce computes; no Byzantine tolerance at all."""

    name = "mean"

    def aggregate(self, grads: torch.Tensor) -> torch.Tensor:
        return grads.mean(dim=0)


class Median(Aggregator):
    """Coordinate-wise median (the mean of the two middle values for an even n)."""

    name = "median"
    condition = "f < n/2"

    def holds(self, n: int) -> bool:
        return 2 * self.f < n

    def aggregate(self, grads: torch.Tensor) -> torch.Tensor:
        return _middle(grads, (grads.shape[0] - 1) // 2).mean(dim=0)


class TrimmedMean(Aggregator):
    """Coordinate-wise mean of the values left once the ``f`` smallest and the ``f``
    largest are dropped."""

    name = "trimmed-mean"
    condition = "f < n/2"

    def holds(self, n: int) -> bool:
        return 2 * self.f < n

    def aggregate(self, grads: torch.Tensor) -> torch.Tensor:
        return _middle(grads, self.f).mean(dim=0)


class GeometricMedian(Aggregator):
    """The point minimising the sum of distances to the rows, by smoothed Weiszfeld
    iterations (Pillutla et al., RFA): ``iterations`` steps of re-weighting each row
    by 1 / max(its distance, ``nu``), from ``start`` ("mean" of the finite rows, or
    "zeros" as ByzFL starts)."""

    name = "geometric-median"
    condition = "f < n/2"

    def __init__(
        self, f: int = 0, *, nu: float = 0.1, iterations: int = 8, start: str = "mean"
    ) -> None:
        super().__init__(f)
        if nu <= 0 or iterations < 1 or start not in ("mean", "zeros"):
            raise AggregationError(
                f"geometric-median needs nu > 0, iterations >= 1 and start 'mean' or "
                f"'zeros'; got nu={nu!r}, iterations={iterations!r}, start={start!r}."
            )
        self.nu, self.iterations, self.start = nu, iterations, start

    def params(self) -> dict[str, Any]:
        return {"f": self.f, "nu": self.nu, "iterations": self.iterations, "start": self.start}

    def holds(self, n: int) -> bool:
        return 2 * self.f < n

    def aggregate(self, grads: torch.Tensor) -> torch.Tensor:
        bad = _bad_rows(grads)
        rows = grads[~bad] if bad.any() else grads  # a copy only when there is a bad row
        if rows.shape[0] == 0:
            return torch.full_like(grads[0], float("nan"))
        z = rows.mean(dim=0) if self.start == "mean" else torch.zeros_like(grads[0])
        alpha = 1.0 / grads.shape[0]
        for _ in range(self.iterations):
            distance = torch.linalg.vector_norm(rows - z, dim=1).clamp_min(self.nu)
            beta = alpha / distance
            z = (beta @ rows) / beta.sum()
        return z


class Krum(Aggregator):
    """The row closest to its n − f − 1 nearest others (Blanchard et al., 2017)."""

    name = "krum"
    condition = "n >= 2f + 3"

    def holds(self, n: int) -> bool:
        return n >= 2 * self.f + 3

    def scores(self, grads: torch.Tensor) -> torch.Tensor:
        """Per row: the mean squared distance to its n − f − 1 nearest other rows."""
        n = grads.shape[0]
        distances = _squared_distances(grads)
        nearest = distances.sort(dim=1).values[:, 1 : n - self.f]  # column 0: itself
        return nearest.mean(dim=1)

    def aggregate(self, grads: torch.Tensor) -> torch.Tensor:
        return grads[_lowest(self.scores(grads), 1)[0]].clone()


class MultiKrum(Krum):
    """The mean of the ``m`` rows with the best Krum scores (default m = n − f)."""

    name = "multi-krum"

    def __init__(self, f: int = 0, *, m: int | None = None) -> None:
        super().__init__(f)
        if m is not None and m < 1:
            raise AggregationError(f"multi-krum averages m >= 1 rows, got m={m!r}.")
        self.m = m

    def params(self) -> dict[str, Any]:
        return {"f": self.f, "m": self.m}

    def check(self, n: int) -> None:
        super().check(n)
        if self.m is not None and self.m > n - self.f:
            raise AggregationError(
                f"multi-krum with f={self.f} averages at most n - f = {n - self.f} rows "
                f"of n={n}, not m={self.m}: lower m or f."
            )

    def aggregate(self, grads: torch.Tensor) -> torch.Tensor:
        m = grads.shape[0] - self.f if self.m is None else self.m
        return grads[_lowest(self.scores(grads), m)].mean(dim=0)


class CenteredClipping(Aggregator):
    """Centered clipping (Karimireddy, He and Jaggi, 2021): from the previous step's
    aggregate ``v``, ``iterations`` times v += mean(clip(x_i − v, tau)). The centre
    carries over from step to step; with workers sending momentum, it is the rule that
    holds against time-coupled attacks.

    ``tau="auto"`` (the default) clips at the median distance of the rows from the
    centre, each iteration: a radius that follows the gradients' scale, so that the
    far half is clipped whatever the model. A fixed radius must be tuned to it: the
    100.0 of ByzFL's default clips nothing when gradients are of norm 1, and the
    rule is then the mean."""

    name = "centered-clipping"
    condition = "f < n/2"

    def __init__(self, f: int = 0, *, tau: float | str = "auto", iterations: int = 1) -> None:
        super().__init__(f)
        if (tau != "auto" and (isinstance(tau, str) or tau <= 0)) or iterations < 1:
            raise AggregationError(
                f"centered-clipping needs tau > 0 (or 'auto') and iterations >= 1, got "
                f"tau={tau!r}, iterations={iterations!r}."
            )
        self.tau, self.iterations = tau, iterations
        self.center: torch.Tensor | None = None

    def params(self) -> dict[str, Any]:
        return {"f": self.f, "tau": self.tau, "iterations": self.iterations}

    def holds(self, n: int) -> bool:
        return 2 * self.f < n

    def aggregate(self, grads: torch.Tensor) -> torch.Tensor:
        v = torch.zeros_like(grads[0]) if self.center is None else self.center
        n = grads.shape[0]
        for _ in range(self.iterations):
            differences = grads - v
            norms = torch.linalg.vector_norm(differences, dim=1)
            # a row with a NaN or an infinity (its distance is not finite) moves
            # nothing: told from the norms, so finite steps pay no extra pass
            finite = torch.isfinite(norms)
            if not bool(finite.all()):
                differences, norms = differences[finite], norms[finite]
            tau = norms.median() if self.tau == "auto" else self.tau
            scale = torch.clamp(tau / norms, max=1.0)  # a zero norm: inf, clamped to 1
            v = v + (scale @ differences) / n
        self.center = v
        return v


class NearestNeighborMixing(Aggregator):
    """NNM (Allouah et al., 2023) before another rule: each row is replaced by the mean
    of its n − f nearest rows (itself included), then ``inner`` aggregates them."""

    def __init__(self, inner: Aggregator) -> None:
        super().__init__(inner.f)
        self.inner = inner
        self.name = f"nnm+{inner.name}"
        self.condition = inner.condition

    def params(self) -> dict[str, Any]:
        return {"inner": self.inner}

    def holds(self, n: int) -> bool:
        return self.f < n and self.inner.holds(n)

    def mix(self, grads: torch.Tensor) -> torch.Tensor:
        n = grads.shape[0]
        distances = _squared_distances(grads)
        # stable: among equal distances the lower worker index comes first
        nearest = distances.sort(dim=1, stable=True).indices[:, : n - self.f]
        return grads[nearest].mean(dim=1)

    def aggregate(self, grads: torch.Tensor) -> torch.Tensor:
        return self.inner.aggregate(self.mix(grads))


#: The most compare-exchanges :func:`_middle` makes before sorting is cheaper: each is
#: two elementwise passes over d values, where sorting columns of n costs about
#: 30 passes at n = 8 (measured on 2 cores, d = 1e6).
_MOST_EXCHANGES = 64


def _middle(grads: torch.Tensor, k: int) -> torch.Tensor:
    """Per coordinate, the n − 2k values left once the k smallest and the k largest
    are dropped (in no particular order), as a ``(n - 2k, d)`` tensor.

    For few workers, k bubble passes from each end (a compare-exchange is an
    elementwise min and max of two rows: contiguous, vectorised, no index bookkeeping)
    are several times faster than sorting each column of n values; otherwise each
    column is sorted. A NaN counts as +inf either way (torch sorts NaN after +inf, and
    min/max would spread it), so at most f bad rows are all trimmed at the top."""
    n = grads.shape[0]
    if k == 0:
        return grads
    if not bool(torch.isfinite(grads.sum())):
        grads = grads.nan_to_num(nan=torch.inf, posinf=torch.inf, neginf=-torch.inf)
    if 2 * k * (n - 1) > _MOST_EXCHANGES:
        return grads.sort(dim=0).values[k : n - k]
    rows = list(grads.unbind(0))
    for p in range(k):
        for i in range(p, n - 1 - p):  # the largest left goes to the bottom
            rows[i], rows[i + 1] = (
                torch.minimum(rows[i], rows[i + 1]),
                torch.maximum(rows[i], rows[i + 1]),
            )
        for i in range(n - 2 - p, p, -1):  # the smallest left goes to the top
            rows[i - 1], rows[i] = (
                torch.minimum(rows[i - 1], rows[i]),
                torch.maximum(rows[i - 1], rows[i]),
            )
    return torch.stack(rows[k : n - k])


def _bad_rows(grads: torch.Tensor) -> torch.Tensor:
    """Rows holding a NaN or an infinity: their sum is not finite (one pass over the
    data, no (n, d) mask; a finite row whose sum overflows is as bad)."""
    return ~torch.isfinite(grads.sum(dim=1))


#: Columns per block of the Gram matrix in :func:`_squared_distances`: a block of
#: n rows in float64 stays in cache (measured on 2 cores, n = 4 and 8).
_GRAM_COLUMNS = 1 << 16


def _squared_distances(grads: torch.Tensor) -> torch.Tensor:
    """Pairwise squared distances in float64, from the Gram matrix summed over blocks
    of columns: one pass over the gradients where ``cdist`` makes n² (5x faster at
    n = 8, d = 1e7), and closer to exact (``cdist`` in float32 is 1.6% off there; this
    is within 1e-7). Rounding leaves equal rows a few ulps apart: they are snapped to
    the tie they are. A row with a non-finite value is infinitely far from every other
    row (and at 0 from itself)."""
    n, d = grads.shape
    gram = torch.zeros(n, n, dtype=torch.float64, device=grads.device)
    for start in range(0, d, _GRAM_COLUMNS):
        block = grads[:, start : start + _GRAM_COLUMNS].double()
        gram.addmm_(block, block.T)
    norms = gram.diagonal().clone()
    both = norms[:, None] + norms[None, :]
    distances = (both - 2 * gram).clamp_min(0.0)
    distances = distances.masked_fill(distances <= 8 * torch.finfo(torch.float64).eps * both, 0.0)
    bad = ~torch.isfinite(norms)
    if bad.any():
        distances = distances.masked_fill(bad[:, None] | bad[None, :], torch.inf)
    distances.fill_diagonal_(0.0)
    return distances


def _lowest(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` lowest scores, ties to the lowest index."""
    return scores.sort(stable=True).indices[:k]
