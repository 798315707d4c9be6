"""Durable checkpoints: atomic, verified, replicated, asynchronous.

:class:`CheckpointStore` is where training, notebook snapshots and serving keep the
state that must outlive a crash. Over a local folder, ``file://``, ``memory://`` or any
other fsspec URL, it guarantees:

- **atomic commit**: a checkpoint's manifest is written after all of its data, and a
  checkpoint without a valid manifest does not exist for any reader; a crash at any
  instant leaves the previous checkpoint or the new one, never a part of one (local
  files: write, fsync, rename, fsync the folder; object stores: one put);
- **verified reads**: every file's size and xxh3-128 hash, and the manifest's own hash,
  are checked before anything is decoded; :meth:`~CheckpointStore.load` falls back to
  the newest checkpoint that verifies, on any replica, and publishes a
  ``checkpoint-skipped`` event for each one it passed over;
- **nothing executable**: tensors and arrays are safetensors, other values JSON;
  pickle is used only when the caller asks for it (notebook snapshots), and never with
  a location other users can write to;
- **written once**: data is stored in content-addressed blobs shared by all runs, so an
  unchanged tensor costs nothing in the next checkpoint; a blob is collected only when
  no manifest names it;
- **retention** keeps the newest ``keep`` checkpoints that verify, plus pinned ones; a
  failed or damaged newer checkpoint never costs an older good one.

Writing is done by the :class:`~._saving.Saver` each store holds (its writer thread,
staging buffers and tensor encoders load with the first save); reading over the
replicas by :mod:`._replicated`; layout and the commit protocol: :mod:`._location`,
:mod:`._local`, :mod:`._fsspec`.
"""

from __future__ import annotations

import builtins
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from ft_notebook.exceptions import CheckpointCorrupt, CheckpointNotFound, StoreError
from ft_notebook.store import _errors
from ft_notebook.store._backends import open_location
from ft_notebook.store._codec import PACK_BELOW
from ft_notebook.store._location import checked_step, run_name
from ft_notebook.store._maintenance import Retention, collect, delete
from ft_notebook.store._raw import RawCheckpoint, open_first
from ft_notebook.store._reader import describe
from ft_notebook.store._replicated import (
    committed,
    first_verifying,
    intact_copy,
    run_names,
    steps_newest_first,
)
from ft_notebook.store._saving import Saver
from ft_notebook.store._types import Checkpoint, CheckpointInfo

if TYPE_CHECKING:
    from ft_notebook.events import EventPayload
    from ft_notebook.store._async import SaveHandle, SaveState
    from ft_notebook.store._codec import Buffer
    from ft_notebook.store._staging import StagingPool

__all__ = ["Checkpoint", "CheckpointInfo", "CheckpointStore", "SaveHandle", "SaveState"]

logger = logging.getLogger(__name__)


class CheckpointStore:
    """Checkpoints of runs at ``url``, committed to each of ``replicas`` too.

    Args:
        url: a folder, ``file://...``, ``memory://...`` or any fsspec URL.
        keep: how many verified checkpoints of each run retention keeps (pinned ones
            come on top); None keeps all. Left out (``"config"``), the setting
            ``ft-notebook.train.store-keep``, read when the store is built.
        replicas: more locations; every checkpoint is committed to each, and a read
            falls back to any that verifies.
        trust: load checkpoints of local folders that another user could have
            written (a file or folder of theirs, or one others can write to), and
            allow pickled data at non-local locations, whose permissions cannot be checked.
        storage_options: passed to fsspec for every location.
        publish_events: publish ``checkpoint-committed`` and ``checkpoint-skipped``.

    Raises:
        StoreError: a location cannot be opened.
        StoreUnsafe: a new local folder could not be made private.
    """

    def __init__(
        self,
        url: str | os.PathLike[str],
        keep: int | Literal["config"] | None = "config",
        replicas: Sequence[str | os.PathLike[str]] = (),
        *,
        trust: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        publish_events: bool = True,
        pack_below: int = PACK_BELOW,
    ) -> None:
        if keep == "config":
            from ft_notebook.config import get_config

            keep = get_config().train.store_keep
        if keep is not None and (type(keep) is not int or keep < 1):
            raise StoreError(
                f"keep must be a positive int or None (keep all), got {keep!r}; leave it "
                f"out for the setting ft-notebook.train.store-keep."
            )
        if isinstance(replicas, (str, os.PathLike)):
            replicas = [replicas]
        self.keep = keep
        self._retention = Retention(keep)
        self._locations = [open_location(u, trust, storage_options or {}) for u in (url, *replicas)]
        self._publish_events = publish_events
        self._saving = Saver(self._locations, self._retention, pack_below, self._publish)

    @property
    def url(self) -> str:
        return self._locations[0].url

    @property
    def replicas(self) -> tuple[str, ...]:
        return tuple(loc.url for loc in self._locations[1:])

    def __repr__(self) -> str:
        return f"CheckpointStore({self.url!r}, keep={self.keep}, replicas={list(self.replicas)})"

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- writing (the store's Saver does it) ----------------------------------------

    def save(
        self,
        run: str,
        step: int,
        state: Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
        *,
        pin: bool = False,
        allow_pickle: bool = False,
    ) -> CheckpointInfo:
        """Commit ``state`` as checkpoint ``step`` of ``run`` at every location.

        ``state`` is a dict of tensors, NumPy arrays and plain values, nested in dicts,
        lists and tuples; ``metadata`` holds plain values (epoch, data cursor).
        ``pin=True`` exempts it from retention. ``allow_pickle=True`` stores other
        objects with pickle (notebook snapshots; private local folders only).

        Raises:
            UnsafeName: ``run`` cannot be a folder name.
            StoreError: a value cannot be stored (the message names it), the step is
                already committed, or writing failed (path, errno, what to do).
            StoreUnsafe: pickle at a location others can write to.
        """
        return self._saving.save(run, step, state, metadata, pin=pin, allow_pickle=allow_pickle)

    def save_async(
        self,
        run: str,
        step: int,
        state: Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
        *,
        pin: bool = False,
        allow_pickle: bool = False,
    ) -> SaveHandle:
        """Like :meth:`save`, but return once ``state`` is copied to host memory.

        A background thread writes and commits it; the handle tells when, and how
        long the caller was blocked (``stall_s``). Per run, one save is written at a
        time and a queued one is superseded by a newer one. Errors in ``state`` raise
        here; errors of the write are on the handle.
        """
        return self._saving.save_async(
            run, step, state, metadata, pin=pin, allow_pickle=allow_pickle
        )

    def warm(self, state: Mapping[str, Any]) -> threading.Thread:
        """Prepare, on a background thread, the host memory ``save_async`` of a state
        shaped like ``state`` will copy into (its tensors are not read).

        Call it once the state has its final shapes (a model and optimizer after their
        first step): the first ``save_async`` then holds the caller up only for the
        copy, not for making and faulting in fresh (or pinned) memory. Returns the
        thread, for whoever wants to wait for it.
        """
        return self._saving.warm(state)

    def save_raw(
        self,
        run: str,
        step: int,
        state: Mapping[str, Any],
        blobs: Mapping[str, Buffer],
        reuse: Mapping[str, int] | None = None,
        *,
        pin: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> CheckpointInfo:
        """Commit a checkpoint of blobs the caller named by their xxh3-128 (see
        :mod:`._raw`): ``blobs`` are new, ``reuse`` (key -> size) were written before.
        ``state`` (plain values) describes them; ``metadata`` is what :meth:`list`
        shows without reading the state. Notebook snapshots use this.

        Raises:
            StoreError: a key is malformed, a reused blob is missing, writing failed.
            StoreUnsafe: pickles (``.pkl``) at a location others can write to.
        """
        return self._saving.save_raw(run, step, state, blobs, reuse, pin=pin, metadata=metadata)

    def pending(self) -> builtins.list[SaveHandle]:
        """Asynchronous saves being written or queued."""
        return self._saving.pending()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until no asynchronous save is left; False if ``timeout`` ran out."""
        return self._saving.flush(timeout)

    def close(self) -> None:
        """Finish every asynchronous save and free the buffers kept for the next."""
        self._saving.close()

    @property
    def _staging(self) -> StagingPool:
        # the saver's host buffers, for the tests that look into them
        return self._saving.staging

    # -- reading ---------------------------------------------------------------------

    def load(self, run: str, step: int | None = None, *, allow_pickle: bool = False) -> Checkpoint:
        """The checkpoint ``step`` of ``run``, or by default the newest that verifies.

        Without ``step``, a checkpoint that does not verify is skipped for an older
        one, with a ``checkpoint-skipped`` event on the run's topic for each skipped.
        A location whose copy does not verify is skipped for a replica.

        Raises:
            CheckpointNotFound: the run, or this step of it, has no checkpoint.
            CheckpointCorrupt: none (or not this step) verifies anywhere.
            StoreError, StoreUnsafe: pickled data without ``allow_pickle``, or at a
                location other users can write to; a checkpoint another user could
                have written, without ``trust=True`` (the message names the owner).
        """
        run = run_name(run)
        if step is not None:
            step = checked_step(step)
            found, reasons = first_verifying(self._locations, run, step, allow_pickle)
            if found is not None:
                return found
            if reasons:
                raise _errors.step_corrupt(run, step, reasons)
            raise self._not_found(run, step)
        skipped: list[tuple[int, str]] = []
        for s in steps_newest_first(self._locations, run):
            found, reasons = first_verifying(self._locations, run, s, allow_pickle)
            if found is not None:
                self._skipped(run, skipped, found.step)
                return found
            if reasons:  # else a folder without a manifest: never committed
                skipped.append((s, "; ".join(reasons)))
        self._skipped(run, skipped, None)
        if skipped:
            raise _errors.all_corrupt(run, skipped)
        raise self._not_found(run, None)

    def open_raw(
        self, run: str, step: int | None = None, *, allow_pickle: bool = False
    ) -> RawCheckpoint:
        """A raw checkpoint (``step``, or the newest whose manifest and state verify),
        whose blobs are read and verified on demand.

        Raises:
            CheckpointNotFound, CheckpointCorrupt: as :meth:`load`.
            StoreUnsafe: it holds pickles and a location others can write to.
        """
        run = run_name(run)
        steps = (
            [checked_step(step)] if step is not None else steps_newest_first(self._locations, run)
        )
        found = open_first(self._locations, run, steps, allow_pickle=allow_pickle)
        if found is None:
            raise self._not_found(run, step)
        return found

    def verify(self, run: str, step: int) -> CheckpointInfo:
        """Read every file of ``run``/``step`` and check it against its manifest.

        Returns the checkpoint's description from the first location that verifies.

        Raises:
            CheckpointNotFound: no such checkpoint.
            CheckpointCorrupt: it verifies nowhere; the message says why at each place.
        """
        run, step = run_name(run), checked_step(step)
        found, reasons = intact_copy(self._locations, run, step)
        if found is not None:
            loc, manifest = found
            self._retention.mark_good(loc.url, run, step, manifest.digest)
            return describe(manifest, loc.url)
        if reasons:
            raise _errors.step_corrupt(run, step, reasons)
        raise self._not_found(run, step)

    def latest(self, run: str) -> CheckpointInfo | None:
        """The newest checkpoint of ``run`` that verifies (its data is read and
        checked), or None if there is none."""
        run = run_name(run)
        for step in steps_newest_first(self._locations, run):
            try:
                return self.verify(run, step)
            except (CheckpointNotFound, CheckpointCorrupt):
                continue
        return None

    def list(self, run: str) -> builtins.list[CheckpointInfo]:
        """Committed checkpoints of ``run`` (a valid manifest at some location), oldest
        first. Their data is not read: :meth:`verify` does that."""
        return committed(self._locations, run_name(run))

    def runs(self) -> builtins.list[str]:
        """Names of the runs that have a folder at any location."""
        return run_names(self._locations)

    # -- deleting --------------------------------------------------------------------

    def delete(self, run: str, step: int) -> None:
        """Delete checkpoint ``step`` of ``run`` at every location, pinned or not, and
        the blobs no other checkpoint needs.

        Raises:
            CheckpointNotFound: it does not exist anywhere.
            StoreError: a location could not be changed.
        """
        run, step = run_name(run), checked_step(step)
        found = False
        for loc in self._locations:
            try:
                found = delete(loc, run, step) or found
                self._retention.forget(loc.url, run, step)
                collect(loc)
            except OSError as e:
                raise StoreError(
                    f"Could not delete step {step} of run {run!r} at {loc.url}: {e}. It no "
                    f"longer loads if its manifest went; check the location, then delete again."
                ) from e
        if not found:
            raise self._not_found(run, step)

    # -- internals -------------------------------------------------------------------

    def _skipped(self, run: str, skipped: Sequence[tuple[int, str]], used: int | None) -> None:
        from ft_notebook.events import CheckpointSkipped

        for step, why in skipped:
            logger.warning("run %r: checkpoint %d skipped (%s); using %s", run, step, why, used)
            self._publish(CheckpointSkipped(step, why, used, self.url), run, step)

    def _publish(self, payload: EventPayload, run: str, step: int) -> None:
        # events (and what they load) are imported by the first checkpoint written, not
        # by opening a store: a notebook restore in a fresh kernel never needs them
        from ft_notebook.events import publish, run_topic

        if not self._publish_events:
            return
        try:
            publish(payload, run_topic(run), run=run, step=step)
        except Exception as e:  # the checkpoint matters more than its announcement
            logger.warning(
                "could not publish %s for run %r step %d: %s", payload.kind, run, step, e
            )

    def _not_found(self, run: str, step: int | None) -> CheckpointNotFound:
        urls = [loc.url for loc in self._locations]
        committed = [i.step for i in self.list(run)]
        if step is None or not committed:
            return _errors.no_run(run, urls, self.runs())
        return _errors.no_step(run, step, urls, committed)


def __getattr__(name: str) -> object:
    # the asynchronous writer's module loads with the first asynchronous save
    if name in ("SaveHandle", "SaveState"):
        from ft_notebook.store import _async

        return getattr(_async, name)
    raise AttributeError(f"module 'ft_notebook.store' has no attribute {name!r}")
