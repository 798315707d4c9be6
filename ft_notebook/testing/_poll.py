"""Wait for a condition with a deadline instead of sleeping for a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class PollTimeout(AssertionError):
    """The predicate did not hold before the deadline."""


def poll_for(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    *,
    what: str | None = None,
    interval: float = 0.001,
    max_interval: float = 0.05,
) -> T:
    """Call ``predicate`` until it returns something truthy and return that value.

    The pause between calls starts at ``interval`` and doubles up to ``max_interval``,
    so a fast condition is seen at once and a slow one does not spin a core. On
    timeout, raises :class:`PollTimeout` with the last value or exception seen.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            last, last_error = value, None
            if value:
                return value
        except Exception as e:
            last_error = e
        if time.monotonic() >= deadline:
            name = what or getattr(predicate, "__name__", repr(predicate))
            seen = f"last error: {last_error!r}" if last_error else f"last value: {last!r}"
            raise PollTimeout(f"{name} did not hold within {timeout} s ({seen})") from last_error
        time.sleep(interval)
        interval = min(interval * 2, max_interval)
