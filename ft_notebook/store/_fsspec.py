"""Checkpoints on any fsspec filesystem: ``memory://``, object stores (``s3://``, ...).

Object stores have no rename and no fsync; what they have is an atomic put: an object
appears whole or not at all. So here

- a blob is one put of all its bytes under its final name;
- a checkpoint is committed by one put of its manifest after every blob it lists, as a
  conditional create (fsspec's ``mode="create"``, If-None-Match where the store has it)
  so that a committed checkpoint is never replaced. Where the filesystem cannot create
  conditionally, a check before the put guards against writers of this process only.

Threads of this process are ordered by the locks of :mod:`._locks`. For ``memory://``
that is the whole story (the filesystem lives in this process). On a shared object
store, writers in other processes are kept apart by the conditional create alone, and
the collector removes only unreferenced blobs older than ``GRACE_S``, so that a blob
another writer has just written for its next manifest is not collected under it.

Pickled data is refused here unless the caller trusts the location (``trust=True``):
who else can write to a bucket cannot be checked from here. ``memory://`` is trusted,
since nothing outside this process reaches it.
"""

from __future__ import annotations

import datetime
import posixpath
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ft_notebook.exceptions import StoreUnsafe, UnsafeName
from ft_notebook.store import _locks
from ft_notebook.store._faults import stage
from ft_notebook.store._location import (
    BLOBS,
    LOCK_TIMEOUT_S,
    Location,
    parse_step_dir,
    run_name,
    step_dir,
)
from ft_notebook.store._manifest import NAME

if TYPE_CHECKING:
    from ft_notebook.store._encode import Blob

GRACE_S = 3600.0
_BATCH = 256 << 20


class FsspecLocation(Location):
    def __init__(self, fs: Any, root: str, url: str, *, trust: bool) -> None:
        self.fs = fs
        self.root = root.rstrip("/") or "/"
        self.url = url
        protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
        self._in_process = "memory" in protocols
        self._trusted = trust or self._in_process
        self._key = f"{protocols[0]}://{self.root}"
        fs.makedirs(self.root, exist_ok=True)

    def _p(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    # -- writing ---------------------------------------------------------------------

    def write_blobs(self, blobs: Sequence[Blob]) -> int:
        todo = [b for b in blobs if self.blob_size(b.key) != b.size]  # else written before
        batch: dict[str, bytes] = {}
        for i, blob in enumerate(todo):
            batch[self._p(BLOBS, blob.key)] = b"".join(blob.parts)
            # One put per blob, a batch at a time: asynchronous filesystems (s3fs, gcsfs)
            # upload a batch concurrently, and memory holds one batch of joined bytes.
            if sum(map(len, batch.values())) >= _BATCH or i == len(todo) - 1:
                self.fs.pipe(batch)
                batch = {}
        stage("blobs-written")
        return sum(b.size for b in todo)

    def commit_manifest(self, run: str, step: int, data: bytes) -> None:
        path = self._p(run, step_dir(step), NAME)
        self.fs.invalidate_cache(posixpath.dirname(path))  # another process may have committed
        if self.fs.exists(path):
            raise FileExistsError(17, "a checkpoint is committed there", path)
        stage("manifest-written")
        try:
            self.fs.pipe_file(path, data, mode="create")
        except (NotImplementedError, TypeError, ValueError):
            self.fs.pipe_file(path, data)  # no conditional create: the check above must do
        stage("manifest-committed")

    # -- reading ---------------------------------------------------------------------

    def read_manifest(self, run: str, step: int) -> bytes:
        return bytes(self.fs.cat_file(self._p(run, step_dir(step), NAME)))

    def read_blob(self, key: str) -> memoryview:
        return memoryview(bytearray(self.fs.cat_file(self._p(BLOBS, key))))  # writable

    def blob_size(self, key: str) -> int | None:
        try:
            return int(self.fs.size(self._p(BLOBS, key)))
        except FileNotFoundError:
            return None

    def runs(self) -> list[str]:
        out = []
        for name in self._ls(self.root, dirs=True):
            try:
                out.append(run_name(name))
            except UnsafeName:
                continue
        return out

    def steps(self, run: str) -> list[int]:
        steps = (parse_step_dir(n) for n in self._ls(self._p(run), dirs=True))
        return [s for s in steps if s is not None]

    # -- removing --------------------------------------------------------------------

    def remove_manifest(self, run: str, step: int) -> bool:
        try:
            self.fs.rm_file(self._p(run, step_dir(step), NAME))
        except FileNotFoundError:
            return False
        stage("checkpoint-uncommitted")
        return True

    def remove_step_dir(self, run: str, step: int) -> None:
        try:
            self.fs.rm(self._p(run, step_dir(step)), recursive=True)
        except FileNotFoundError:
            return
        stage("checkpoint-removed")

    def blob_names(self) -> list[str]:
        return self._ls(self._p(BLOBS), dirs=False)

    def collectable(self, name: str) -> bool:
        if self._in_process:
            return True  # the collector holds this process's exclusive lock
        try:
            modified = self.fs.modified(self._p(BLOBS, name))
        except (NotImplementedError, FileNotFoundError, OSError):
            return False  # cannot tell its age: keep it
        if modified.tzinfo is None:
            modified = modified.replace(tzinfo=datetime.timezone.utc)
        age = datetime.datetime.now(datetime.timezone.utc) - modified
        return bool(age.total_seconds() > GRACE_S)

    def remove_blob(self, name: str) -> None:
        try:
            self.fs.rm_file(self._p(BLOBS, name))
        except FileNotFoundError:
            return
        stage("blob-removed")

    # -- locks and trust -------------------------------------------------------------

    def run_lock(self, run: str) -> AbstractContextManager[None]:
        return _locks.mutex(f"{self._key}/{run}", LOCK_TIMEOUT_S, f"run {run!r} at {self.url}")

    def writing(self) -> AbstractContextManager[None]:
        return _locks.shared_exclusive(self._key).shared()

    def collecting(self) -> AbstractContextManager[bool]:
        return _locks.shared_exclusive(self._key).try_exclusive()

    def check_private(self, action: str, run: str, step: int | None, keys: Sequence[str]) -> None:
        if self._trusted:
            return
        raise StoreUnsafe(
            f"Refusing to {action} pickled objects at {self.url}: who else can write "
            f"there cannot be checked, and unpickling runs code named in the data. If "
            f"only you can write to it, open the store with CheckpointStore(..., "
            f"trust=True); otherwise keep snapshots in a local folder of your own."
        )

    def check_author(self, run: str, step: int) -> None:
        return  # who wrote an object cannot be told here: the store's access rules decide

    def _ls(self, path: str, *, dirs: bool) -> list[str]:
        self.fs.invalidate_cache(path)  # another process may have written since
        try:
            entries: Iterator[dict[str, Any]] = iter(self.fs.ls(path, detail=True))
        except FileNotFoundError:
            return []
        want = "directory" if dirs else "file"
        return [posixpath.basename(e["name"].rstrip("/")) for e in entries if e.get("type") == want]
