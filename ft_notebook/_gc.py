"""Holding Python's cyclic garbage collector through a burst of allocations.

``%load_ext ft_notebook`` imports some forty modules and ``%ft restore`` unpickles a
namespace: many long-lived objects and next to no garbage. Each allocation burst makes
the collector walk the kernel's young objects again and again; measured in a real
kernel, a restore of a small notebook spent about 5 ms of its median 95 ms there
(``benchmarks/bench_snapshots.py``). Garbage made meanwhile is collected on the next
pass after the burst.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (nesting and errors are safe)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
