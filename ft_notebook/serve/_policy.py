"""The router's small rules, kept apart so each can be tested alone: a replica's
circuit breaker, the budgets that cap retries and hedges, a latency window, and the
tier a number of replicas gives.

All of them run on the router's event loop; none takes a lock.
"""

from __future__ import annotations

import collections
import enum
import itertools
import threading
import time
from typing import Any

from ft_notebook.events import Health


def tier_of(serving: int, wanted: int) -> Health:
    """A service's tier: HEALTHY with every replica wanted, DEGRADED with some,
    FALLBACK with none (the coordinator counts ready ones, a router those in rotation)."""
    if serving >= wanted:
        return Health.HEALTHY
    return Health.DEGRADED if serving else Health.FALLBACK


class Breaker(str, enum.Enum):
    """A replica's circuit::

    CLOSED (takes requests) ─► OPEN (n failures in a row, a failed ping, or its
    worker lost) ─► HALF_OPEN (after open_s: one probe request) ─► CLOSED | OPEN
    """

    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


class CircuitBreaker:
    def __init__(self, failures: int, open_s: float) -> None:
        self.limit, self.open_s = failures, open_s
        self.state = Breaker.CLOSED
        self.streak = 0
        self.opened_at = 0.0
        self.probing = False  # a half-open probe is in flight
        self.reason = ""

    def allows(self, now: float | None = None) -> bool:
        """Whether a request may go to the replica now (a half-open one takes one)."""
        if self.state is Breaker.OPEN and (now or time.monotonic()) - self.opened_at >= self.open_s:
            self.state = Breaker.HALF_OPEN
        if self.state is Breaker.CLOSED:
            return True
        return self.state is Breaker.HALF_OPEN and not self.probing

    def in_rotation(self) -> bool:
        return self.state is Breaker.CLOSED

    def started(self) -> None:
        if self.state is Breaker.HALF_OPEN:
            self.probing = True

    def succeeded(self) -> None:
        self.state, self.streak, self.probing, self.reason = Breaker.CLOSED, 0, False, ""

    def failed(self, reason: str, *, at_once: bool = False) -> bool:
        """Count a failure; returns whether the breaker opened now."""
        self.streak += 1
        self.probing = False
        opens = at_once or self.streak >= self.limit or self.state is Breaker.HALF_OPEN
        was_open = self.state is Breaker.OPEN
        if opens:
            self.state, self.opened_at, self.reason = Breaker.OPEN, time.monotonic(), reason
        return opens and not was_open


class Budget:
    """A token bucket: each request adds ``fraction`` of a token, up to ``burst``
    tokens; spending one needs a whole token. So over any stretch of N requests at most
    ``fraction x N + burst`` are spent, however quiet the time before it was."""

    def __init__(self, fraction: float, burst: float = 1.0) -> None:
        self.fraction, self.burst = fraction, burst
        self.tokens = burst
        self.requests = self.spent = 0

    def request(self) -> None:
        self.requests += 1
        self.tokens = min(self.burst, self.tokens + self.fraction)

    def take(self) -> bool:
        if self.tokens < 1 - 1e-9:  # twenty 0.05s sum to 0.999...
            return False
        self.tokens -= 1
        self.spent += 1
        return True


class Pace:
    """At most ``rate`` calls a second (0: no limit), from any thread: :meth:`delay`
    books the caller's turn and says how long to wait for it. The fallback answers at
    this pace: at ~60,000 answers a second it took the CPU that the workers restarting
    under it needed (every worker killed: replicas back in 12.1 s instead of 9.8 s)."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def delay(self) -> float:
        if not self.interval:
            return 0.0
        with self._lock:
            now = time.monotonic()
            turn = max(now, self._next)
            self._next = turn + self.interval
        return turn - now


class Latencies:
    """The newest ``size`` latencies of successful calls, in seconds."""

    def __init__(self, size: int = 512) -> None:
        self._window: collections.deque[float] = collections.deque(maxlen=size)

    def add(self, seconds: float) -> None:
        self._window.append(seconds)

    def __len__(self) -> int:
        return len(self._window)

    def newest(self, n: int) -> list[float]:
        """The newest ``n`` latencies (all of them, if the window holds fewer)."""
        return list(itertools.islice(reversed(self._window), max(n, 0)))

    def quantile(self, q: float) -> float | None:
        if not self._window:
            return None
        ordered = sorted(self._window)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def request_bytes(x: Any) -> int:
    """What a request weighs, measured in the caller before it is sent: the bytes of
    its arrays and tensors (nested in lists, tuples and dicts), else Dask's estimate."""
    if hasattr(x, "element_size") and hasattr(x, "numel"):  # a torch tensor
        return int(x.element_size() * x.numel())
    if isinstance(x, (list, tuple)):
        return sum(request_bytes(v) for v in x)
    if isinstance(x, dict):
        return sum(request_bytes(v) for v in x.values())
    from dask.sizeof import sizeof

    return int(sizeof(x))


def shown_bytes(n: int) -> str:
    """``n`` bytes as a person reads them (``'1.02 GB'``)."""
    from dask.utils import format_bytes

    return str(format_bytes(n))
