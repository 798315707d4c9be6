"""Byzantine-robust aggregation: rules that bound what f bad workers of n can do.

A worker whose GPU flips bits, whose data shard is poisoned or whose code is wrong
sends gradients that plain averaging passes into every replica. A robust rule
aggregates the stacked per-worker gradients of one step so that f such workers
move the result by a bounded amount:

    rule                  condition       (f bad workers among n)
    mean                  none: it is what all-reduce computes, and what fails
    median                f < n/2         coordinate-wise
    trimmed-mean          f < n/2         coordinate-wise, f dropped at each end
    geometric-median      f < n/2         smoothed Weiszfeld
    krum                  n >= 2f + 3     the row nearest its n - f - 1 neighbours
    multi-krum            n >= 2f + 3     the mean of the m best Krum rows (m <= n - f)
    centered-clipping     f < n/2         clipped steps from the last aggregate
    nnm+RULE              RULE's          nearest-neighbour mixing first

A rule raises :class:`~ft_notebook.exceptions.AggregationError` naming n and f when
its condition does not hold, never falls back silently. Every rule is deterministic
(ties go to the lowest worker index), so every rank computing it on the same
gathered gradients gets the same aggregate and the replicas stay identical.
:mod:`._attacks` has what bad workers send, for tests and drills.
"""

from __future__ import annotations

from typing import Any

from ft_notebook.exceptions import AggregationError
from ft_notebook.robust._aggregators import (
    Aggregator,
    CenteredClipping,
    GeometricMedian,
    Krum,
    Mean,
    Median,
    MultiKrum,
    NearestNeighborMixing,
    TrimmedMean,
)
from ft_notebook.robust._attacks import ATTACKS, attack

__all__ = [
    "ATTACKS",
    "RULES",
    "Aggregator",
    "CenteredClipping",
    "GeometricMedian",
    "Krum",
    "Mean",
    "Median",
    "MultiKrum",
    "NearestNeighborMixing",
    "TrimmedMean",
    "aggregator",
    "attack",
]

_RULES: dict[str, type[Aggregator]] = {
    rule.name: rule
    for rule in (Mean, Median, TrimmedMean, GeometricMedian, Krum, MultiKrum, CenteredClipping)
}
RULES = tuple(_RULES)


def aggregator(name: str, f: int = 0, **params: Any) -> Aggregator:
    """The rule called ``name`` (``"nnm+median"`` mixes first), tolerating ``f``."""
    base = name.removeprefix("nnm+")
    rule = _RULES.get(base)
    if rule is None:
        known = ", ".join(RULES)
        raise AggregationError(f"unknown aggregator {name!r}; known: {known} (and nnm+ each).")
    made = rule(f, **params) if params else rule(f)
    return NearestNeighborMixing(made) if name.startswith("nnm+") else made
