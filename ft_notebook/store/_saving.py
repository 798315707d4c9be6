"""Writing checkpoints: saves, asynchronous saves, raw ones, and the memory copies go to.

:class:`Saving` is the writing half of :class:`~ft_notebook.store.CheckpointStore`,
which keeps reading, listing and deleting. The asynchronous writer, the staging
buffers and the encoders (:mod:`._encode`, which imports the tensor encoders lazily
too) load with the first save that needs them, so a store opened only to read (a
notebook restore in a fresh kernel) never imports them.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ft_notebook.store import _errors
from ft_notebook.store._location import Location, checked_step, run_name
from ft_notebook.store._maintenance import Retention, newest
from ft_notebook.store._manifest import FileEntry, Manifest
from ft_notebook.store._reader import describe
from ft_notebook.store._types import CheckpointInfo
from ft_notebook.store._values import encode

if TYPE_CHECKING:
    from ft_notebook.events import EventPayload
    from ft_notebook.store._async import AsyncWriter, SaveHandle
    from ft_notebook.store._codec import Buffer
    from ft_notebook.store._encode import Blob, Job
    from ft_notebook.store._staging import StagingPool
    from ft_notebook.store._tensors import Stage


class Saving:
    """The saving methods of CheckpointStore (a mixin: it provides the rest)."""

    _locations: list[Location]
    _retention: Retention
    _pack_below: int
    _making: threading.Lock
    _writer_made: AsyncWriter | None
    _staging_made: StagingPool | None

    if TYPE_CHECKING:  # provided by CheckpointStore

        @property
        def url(self) -> str: ...

        def _publish(self, payload: EventPayload, run: str, step: int) -> None: ...

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
        return self._commit(self._prepare(run, step, state, metadata, pin, allow_pickle))

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
        from ft_notebook.store._async import SaveHandle
        from ft_notebook.store._tensors import Stage

        start = time.perf_counter()
        stage = Stage(self._staging)
        try:
            job = self._prepare(run, step, state, metadata, pin, allow_pickle, stage=stage)
            stage.copy_all()
        except BaseException:
            stage.release()
            raise
        handle = SaveHandle(job.run, job.step)
        handle.stall_s = time.perf_counter() - start
        self._writer.submit(handle, lambda: self._commit(job), stage.release)
        return handle

    def warm(self, state: Mapping[str, Any]) -> threading.Thread:
        """Prepare, on a background thread, the host memory ``save_async`` of a state
        shaped like ``state`` will copy into (its tensors are not read).

        Call it once the state has its final shapes (a model and optimizer after their
        first step): the first ``save_async`` then holds the caller up only for the
        copy, not for making and faulting in fresh (or pinned) memory. Returns the
        thread, for whoever wants to wait for it.
        """
        from ft_notebook.store._tensors import staging_sizes

        return self._staging.warm(staging_sizes(state))

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
        run = run_name(run)
        if any(k.endswith(".pkl") for k in [*blobs, *(reuse or {})]):
            for loc in self._locations:
                loc.check_private("save", run, None, ())
        from ft_notebook.store import _encode

        meta = encode(dict(metadata or {}), "metadata")
        job = _encode.Job(run, checked_step(step), _encode.Encoded(tree=None), meta, pin)
        described = _encode.state_blob(state)
        files = [*_encode.raw_blobs(blobs), described]
        return self._commit(job, (files, described.key, reuse or {}))

    def pending(self) -> builtins.list[SaveHandle]:
        """Asynchronous saves being written or queued."""
        return [] if self._writer_made is None else self._writer_made.pending()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until no asynchronous save is left; False if ``timeout`` ran out."""
        return True if self._writer_made is None else self._writer_made.wait_idle(timeout)

    def close(self) -> None:
        """Finish every asynchronous save and free the buffers kept for the next."""
        self.flush()
        if self._staging_made is not None:
            self._staging_made.clear()

    @property
    def _writer(self) -> AsyncWriter:
        with self._making:
            if self._writer_made is None:
                from ft_notebook.store._async import AsyncWriter

                self._writer_made = AsyncWriter(f"ft-notebook-store-writer {self.url}")
            return self._writer_made

    @property
    def _staging(self) -> StagingPool:
        with self._making:
            if self._staging_made is None:
                from ft_notebook.store._staging import StagingPool

                self._staging_made = StagingPool()
            return self._staging_made

    def _prepare(
        self,
        run: str,
        step: int,
        state: Mapping[str, Any],
        metadata: Mapping[str, Any] | None,
        pin: bool,
        allow_pickle: bool,
        *,
        stage: Stage | None = None,
    ) -> Job:
        run = run_name(run)
        if allow_pickle:
            for loc in self._locations:
                loc.check_private("save", run, None, ())
        from ft_notebook.store import _encode

        return _encode.prepare(run, checked_step(step), state, metadata, pin, allow_pickle, stage)

    def _commit(
        self, job: Job, raw: tuple[builtins.list[Blob], str, Mapping[str, int]] | None = None
    ) -> CheckpointInfo:
        from ft_notebook.store._encode import reused_entries, to_blobs

        blobs, state_key = to_blobs(job.state, self._pack_below) if raw is None else raw[:2]
        files = {b.key: FileEntry(b.size, b.key.split(".", 1)[0]) for b in blobs}
        done: list[str] = []
        manifest = None
        for loc in self._locations:
            try:
                with loc.writing():
                    reused = reused_entries(loc, raw[2]) if raw is not None else {}
                    manifest = Manifest(
                        job.run,
                        job.step,
                        time.time(),
                        job.pin,
                        job.metadata,
                        state_key,
                        {**reused, **files},
                    )
                    loc.write_blobs(blobs)
                    with loc.run_lock(job.run):
                        loc.commit_manifest(job.run, job.step, manifest.to_bytes())
            except FileExistsError:
                raise _errors.already_committed(job.run, job.step, loc.url) from None
            except OSError as e:
                previous = newest(loc, job.run)
                raise _errors.write_failed(
                    e, run=job.run, step=job.step, url=loc.url, previous=previous, committed_to=done
                ) from e
            done.append(loc.url)
            self._retention.mark_good(loc.url, job.run, job.step, manifest.digest)
            self._retention.after_commit(loc, job.run)
        assert manifest is not None  # there is always a location
        from ft_notebook.events import CheckpointCommitted

        self._publish(CheckpointCommitted(job.step, manifest.nbytes, self.url), job.run, job.step)
        return describe(manifest, self.url)
