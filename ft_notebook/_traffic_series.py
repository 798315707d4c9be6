"""A service's traffic over time, made of every caller's ``service-traffic`` windows.

Each caller's router publishes what it did in windows of about 2 s
(:class:`~ft_notebook.events.ServiceTraffic`, :mod:`ft_notebook.serve._meter`); the
fold of a service's events (:class:`ft_notebook.runfold.ServiceView`) puts each window
in the bucket of :data:`BUCKET_S` seconds its end falls in, so the panel, the docked
dashboard and a notebook read one series, whoever routed the requests.

Guarantees:
- a bucket's requests/s is the sum over its callers of each one's rate there (its
  requests over its windows' seconds: two windows of one caller in a bucket count
  once, at their mean rate), never a caller's alone;
- a bucket's p99 is the largest of its callers' p99s: the p99 of all their answers
  cannot be made from theirs, and the slowest caller's is what some caller saw;
- at most :data:`MAX_WINDOWS` buckets are kept, the newest (8 minutes at 2 s);
- pure: no clock, no I/O; a window whose numbers are not finite or negative (another
  version, a hand-written journal) leaves the series as it was.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ft_notebook._event_kinds import ServiceTraffic

#: Seconds of one bucket of the series: the routers' window.
BUCKET_S = 2.0
#: Buckets a series keeps, the newest.
MAX_WINDOWS = 240


@dataclass(frozen=True)
class CallerTraffic:
    """One caller's windows in one bucket, summed (``p99_s``: the largest)."""

    requests: int = 0
    seconds: float = 0.0
    answered: int = 0  # by replicas
    fallback: int = 0
    failed: int = 0
    p99_s: float | None = None


@dataclass(frozen=True)
class TrafficPoint:
    """The traffic of every caller in the bucket that starts at ``time``."""

    time: float
    callers: Mapping[str, CallerTraffic] = field(default_factory=dict)

    @property
    def requests_per_s(self) -> float:
        """Summed over callers."""
        return sum(c.requests / c.seconds for c in self.callers.values())

    @property
    def fallback_per_s(self) -> float:
        return sum(c.fallback / c.seconds for c in self.callers.values())

    @property
    def failed_per_s(self) -> float:
        return sum(c.failed / c.seconds for c in self.callers.values())

    @property
    def p99_s(self) -> float | None:
        """The largest of the callers' p99s (None: no replica answered)."""
        return max((c.p99_s for c in self.callers.values() if c.p99_s is not None), default=None)


def add_window(series: tuple[TrafficPoint, ...], w: ServiceTraffic) -> tuple[TrafficPoint, ...]:
    """``series`` with caller window ``w`` added to its bucket, oldest bucket first."""
    if not _sound(w):
        return series
    start = math.floor(w.end / BUCKET_S) * BUCKET_S
    times = [p.time for p in series]
    at = bisect.bisect_left(times, start)
    if at < len(series) and series[at].time == start:
        point = series[at]
        rest = series[:at], series[at + 1 :]
    elif at == 0 and len(series) >= MAX_WINDOWS:
        return series  # older than every bucket kept: it would go at once
    else:
        point = TrafficPoint(start)
        rest = series[:at], series[at:]
    before = point.callers.get(w.caller) or CallerTraffic()
    p99s = [v for v in (before.p99_s, w.p99_s) if v is not None]
    merged = CallerTraffic(
        requests=before.requests + w.requests,
        seconds=before.seconds + max(w.end - w.start, 1e-3),
        answered=before.answered + sum(w.by_replica.values()),
        fallback=before.fallback + w.fallback,
        failed=before.failed + w.failed,
        p99_s=max(p99s) if p99s else None,
    )
    point = TrafficPoint(start, {**point.callers, w.caller: merged})
    return (*rest[0], point, *rest[1])[-MAX_WINDOWS:]


def _sound(w: ServiceTraffic) -> bool:
    if not isinstance(w.caller, str) or not isinstance(w.by_replica, dict):
        return False
    numbers = [w.start, w.end, w.requests, w.fallback, w.failed, *w.by_replica.values()]
    numbers += [v for v in (w.p50_s, w.p99_s) if v is not None]
    try:
        return all(math.isfinite(v) and v >= 0 for v in numbers) and w.end >= w.start
    except TypeError:  # a string where a number goes
        return False
