"""Holding Python's cyclic garbage collector through a burst of allocations.

``%load_ext ft_notebook`` imports some forty modules and ``%ft restore`` unpickles a
namespace: many long-lived objects and next to no garbage, while each burst of
allocations makes the collector walk the young objects again and again. Garbage made
meanwhile is collected by the first pass after the burst. Code of the user's that runs
inside such a burst (a cell replayed while a pickle refers to its result) runs with
the collector as the user had it (:func:`collector_as_before`).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_paused_by_us = 0  # depth of collector_paused blocks that turned the collector off


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (nesting and errors are safe)."""
    global _paused_by_us
    if not gc.isenabled():  # off already, by the user or an outer block
        yield
        return
    gc.disable()
    _paused_by_us += 1
    try:
        yield
    finally:
        _paused_by_us -= 1
        gc.enable()


@contextlib.contextmanager
def collector_as_before() -> Iterator[None]:
    """Inside a :func:`collector_paused` block: the collector as it was before it."""
    global _paused_by_us
    if not _paused_by_us:
        yield
        return
    paused, _paused_by_us = _paused_by_us, 0
    gc.enable()
    try:
        yield
    finally:
        gc.disable()
        _paused_by_us = paused
