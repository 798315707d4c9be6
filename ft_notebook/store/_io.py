"""A few threads for the store's bulk work: hashing and writing blobs side by side.

xxh3, ``os.write`` and ``fsync`` release the GIL, so blobs hashed and written by
several threads keep more than one core and more than one I/O request busy: on a
2-core VM, four writers with their fsyncs finished 500 MB in about 0.8x the time of one
sequential write. The pool is created on first use, and a forked child gets a new one
(the parent's threads did not follow it into the child).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

A = TypeVar("A")
R = TypeVar("R")

WORKERS = 4
_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def io_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="ft-notebook-store-io")
        return _pool


def run_all(fn: Callable[[A], R], items: Sequence[A]) -> list[R]:
    """``fn`` of every item, side by side; when this returns or raises (the first
    error), every call has finished. Runs inline once the interpreter is exiting and
    the pool takes no more work, so a save in flight at exit still completes."""
    futures: list[Future[R] | None] = []
    for item in items:
        try:
            futures.append(io_pool().submit(fn, item))
        except RuntimeError:  # "cannot schedule new futures after interpreter shutdown"
            futures.append(None)
    results: list[R] = []
    error: BaseException | None = None
    for item, future in zip(items, futures, strict=True):
        try:
            results.append(fn(item) if future is None else future.result())
        except BaseException as e:  # every call is waited for before raising
            error = error or e
    if error is not None:
        raise error
    return results


def _forget_after_fork() -> None:
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
