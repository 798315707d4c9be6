"""Saves that return at once: the caller pays for a copy, a background thread for the rest.

``save_async`` copies the state to host memory in the caller's thread (tensors cloned,
arrays copied, plain values encoded; GPU tensors copied to pinned memory without
waiting) and hands the copy to a writer thread, which hashes, writes and commits it.
The time the caller was blocked is the handle's ``stall_s``.

Guarantees:

- when ``save_async`` returns, the caller may change its tensors: the copy is taken;
- per run, saves are written one at a time, in the order they were asked for; a save
  still queued when a newer one of the same run arrives is superseded: it is never
  written, and its handle says so (a checkpoint already out of date before it is
  written is not worth the I/O, and the queue cannot grow without bound);
- the writer thread runs only while there is work and is not a daemon, so a process
  that exits with a save in flight finishes it first.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable

from ft_notebook.exceptions import StoreError
from ft_notebook.store._types import CheckpointInfo

logger = logging.getLogger(__name__)


class SaveState(str, enum.Enum):
    """Where an asynchronous save is::

    QUEUED ─► WRITING ─► COMMITTED | FAILED
    QUEUED ─► SUPERSEDED (a newer save of the run came first)
    """

    QUEUED = "QUEUED"
    WRITING = "WRITING"
    COMMITTED = "COMMITTED"
    FAILED = "FAILED"
    SUPERSEDED = "SUPERSEDED"


class SaveHandle:
    """The caller's view of one asynchronous save."""

    def __init__(self, run: str, step: int) -> None:
        self.run = run
        self.step = step
        #: Seconds the caller was blocked in ``save_async`` (the copy).
        self.stall_s = 0.0
        #: The step of the save that replaced this one, if it was superseded.
        self.superseded_by: int | None = None
        self._state = SaveState.QUEUED
        self._finished = threading.Event()
        self._info: CheckpointInfo | None = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[SaveHandle], object]] = []
        self._callbacks_lock = threading.Lock()

    def add_done_callback(self, fn: Callable[[SaveHandle], object]) -> None:
        """Call ``fn(handle)`` once the save is done (on the writer's thread), or now if
        it is done already. An error in ``fn`` is logged, never raised."""
        with self._callbacks_lock:
            if not self._finished.is_set():
                self._callbacks.append(fn)
                return
        _call(fn, self)

    @property
    def state(self) -> SaveState:
        return self._state

    def done(self) -> bool:
        """True once the save committed, failed or was superseded."""
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until :meth:`done`, at most ``timeout`` seconds; return :meth:`done`."""
        return self._finished.wait(timeout)

    def exception(self) -> BaseException | None:
        """The error of a save that failed; None while it runs, or if it did not fail."""
        return self._error

    def result(self, timeout: float | None = None) -> CheckpointInfo:
        """The committed checkpoint; raises the save's error, or StoreError if it was
        superseded, or TimeoutError if it is not done within ``timeout`` seconds."""
        if not self._finished.wait(timeout):
            raise TimeoutError(
                f"The save of run {self.run!r} step {self.step} is still {self._state.value} "
                f"after {timeout} s. Wait longer, or check that the storage answers."
            )
        if self._error is not None:
            raise self._error
        if self._info is None:
            raise StoreError(
                f"The save of run {self.run!r} step {self.step} was superseded by step "
                f"{self.superseded_by} before it was written; nothing was written for "
                f"step {self.step}. This is expected when saves come faster than the "
                f"storage takes them."
            )
        return self._info

    def __repr__(self) -> str:
        state = self._state.value
        return f"<SaveHandle run={self.run!r} step={self.step} {state} stall={self.stall_s:.4f}s>"

    def _finish(
        self, state: SaveState, info: CheckpointInfo | None, error: BaseException | None
    ) -> None:
        self._state, self._info, self._error = state, info, error
        with self._callbacks_lock:
            self._finished.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            _call(fn, self)


def _call(fn: Callable[[SaveHandle], object], handle: SaveHandle) -> None:
    try:
        fn(handle)
    except Exception:
        logger.exception("a callback of %r failed", handle)


Job = Callable[[], CheckpointInfo]
Release = Callable[[], None]


class AsyncWriter:
    """One writer thread per store, started on demand."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._queue: dict[str, tuple[SaveHandle, Job, Release]] = {}  # per run; FIFO
        self._active: SaveHandle | None = None
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition(self._lock)

    def submit(self, handle: SaveHandle, job: Job, release: Release) -> None:
        """Queue ``job``; ``release`` frees its copy once it ran or was superseded."""
        with self._lock:
            old = self._queue.pop(handle.run, None)
            self._queue[handle.run] = (handle, job, release)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=False)
                self._thread.start()
        if old is not None:
            old[0].superseded_by = handle.step
            old[2]()
            old[0]._finish(SaveState.SUPERSEDED, None, None)

    def pending(self) -> list[SaveHandle]:
        with self._lock:
            active = [self._active] if self._active is not None else []
            return active + [h for h, _, _ in self._queue.values()]

    def wait_idle(self, timeout: float | None) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._thread is None, timeout)

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._thread = None
                    self._active = None
                    self._idle.notify_all()
                    return
                run = next(iter(self._queue))
                handle, job, release = self._queue.pop(run)
                self._active = handle
                handle._state = SaveState.WRITING
            try:
                info = job()
            except BaseException as e:  # kept on the handle: the caller decides
                release()
                logger.warning(
                    "asynchronous save of run %r step %d failed: %s", handle.run, handle.step, e
                )
                handle._finish(SaveState.FAILED, None, e)
            else:
                release()
                handle._finish(SaveState.COMMITTED, info, None)
