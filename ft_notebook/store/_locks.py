"""Locks between threads of one process, for locations that have no file locks.

A local store locks with ``flock`` (see :mod:`._local`), which also orders threads.
``memory://`` and object stores have no such thing; there the threads of this process
are ordered by these locks, keyed by location, so two stores opened on the same URL
share them. A forked child starts with fresh, unlocked ones: a lock held by a thread
that did not follow the fork would never be released.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ft_notebook.exceptions import StoreError


class SharedExclusive:
    """Many holders of :meth:`shared`, or one of :meth:`try_exclusive`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextmanager
    def try_exclusive(self) -> Iterator[bool]:
        """Yields False at once, without the lock, when anyone holds it."""
        with self._cond:
            got = not self._exclusive and self._shared == 0
            if got:
                self._exclusive = True
        try:
            yield got
        finally:
            if got:
                with self._cond:
                    self._exclusive = False
                    self._cond.notify_all()


_guard = threading.Lock()
_shared_exclusive: dict[str, SharedExclusive] = {}
_mutexes: dict[str, threading.Lock] = {}


def shared_exclusive(key: str) -> SharedExclusive:
    with _guard:
        return _shared_exclusive.setdefault(key, SharedExclusive())


@contextmanager
def mutex(key: str, timeout: float, what: str) -> Iterator[None]:
    with _guard:
        lock = _mutexes.setdefault(key, threading.Lock())
    if not lock.acquire(timeout=timeout):
        raise StoreError(
            f"Waited {timeout:.0f} s for the lock on {what}; another thread of this "
            f"process still holds it (a save or delete that hangs on its storage). "
            f"Check that the storage answers, then try again."
        )
    try:
        yield
    finally:
        lock.release()


def _reset_after_fork() -> None:
    global _guard
    _guard = threading.Lock()
    _shared_exclusive.clear()
    _mutexes.clear()


os.register_at_fork(after_in_child=_reset_after_fork)
