"""Writing checkpoints: saves, asynchronous saves, raw ones, and the memory copies go to.

:class:`Saver` is the writing half of a :class:`~ft_notebook.store.CheckpointStore`,
which holds one and keeps reading, listing and deleting itself. The store hands it
everything it writes with when it is built, so the saver reaches nothing of the store
behind its back. The asynchronous writer, the staging buffers and the encoders
(:mod:`._encode`, which imports the tensor encoders lazily too) load with the first
save that needs them, so a store opened only to read (a notebook restore in a fresh
kernel) never imports them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
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

#: How a saver announces a commit: ``publish(payload, run, step)``.
Publish = Callable[["EventPayload", str, int], None]


class Saver:
    """Commits checkpoints to each of ``locations`` in turn, the first being the store's.

    Args:
        locations: where every checkpoint is committed, in order; the first names the
            store (in events, descriptions and the writer thread's name).
        retention: told of each commit; it deletes what ``keep`` no longer covers.
        pack_below: tensors smaller than this many bytes share one blob.
        publish: announces ``checkpoint-committed`` (the store decides whether and how).
    """

    def __init__(
        self,
        locations: Sequence[Location],
        retention: Retention,
        pack_below: int,
        publish: Publish,
    ) -> None:
        self._locations = locations
        self._retention = retention
        self._pack_below = pack_below
        self._publish = publish
        self._url = locations[0].url
        # made by the first save that needs them: see _writer and staging
        self._making = threading.Lock()
        self._writer_made: AsyncWriter | None = None
        self._staging_made: StagingPool | None = None

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
        """:meth:`CheckpointStore.save <ft_notebook.store.CheckpointStore.save>`: encode
        ``state`` here, then commit it."""
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
        """:meth:`CheckpointStore.save_async
        <ft_notebook.store.CheckpointStore.save_async>`: encode and copy ``state`` into
        staging buffers here, then hand the commit to the writer thread, which gives the
        buffers back once it is done with them."""
        from ft_notebook.store._async import SaveHandle
        from ft_notebook.store._tensors import Stage

        start = time.perf_counter()
        stage = Stage(self.staging)
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
        """Make, on a background thread, the staging buffers a state shaped like
        ``state`` needs (see :meth:`CheckpointStore.warm
        <ft_notebook.store.CheckpointStore.warm>`)."""
        from ft_notebook.store._tensors import staging_sizes

        return self.staging.warm(staging_sizes(state))

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
        """:meth:`CheckpointStore.save_raw <ft_notebook.store.CheckpointStore.save_raw>`:
        the caller's blobs are committed as they are, with ``state`` described in one
        more."""
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

    def pending(self) -> list[SaveHandle]:
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

                self._writer_made = AsyncWriter(f"ft-notebook-store-writer {self._url}")
            return self._writer_made

    @property
    def staging(self) -> StagingPool:
        """The host buffers asynchronous saves copy into (made on first use)."""
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
        self, job: Job, raw: tuple[list[Blob], str, Mapping[str, int]] | None = None
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

        self._publish(CheckpointCommitted(job.step, manifest.nbytes, self._url), job.run, job.step)
        return describe(manifest, self._url)
