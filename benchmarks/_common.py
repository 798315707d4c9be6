"""Shared bits of the benchmarks: interleaved repetitions, polling, Markdown rows."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(arms: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Run the arms in turn, ``repeats`` rounds, so machine noise hits them alike."""
    results: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(repeats):
        for name, arm in arms.items():
            results[name].append(arm())
    return results


def row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def median(values: list[float]) -> float:
    return statistics.median(values)


def poll(condition: Callable[[], Any], deadline_s: float, what: str, every_s: float = 0.02) -> Any:
    """Call ``condition`` until it returns something truthy; TimeoutError past the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {deadline_s:g} s")
        time.sleep(every_s)
