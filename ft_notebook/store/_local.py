"""Checkpoints in a local folder, committed with the fsync discipline of a database.

Guarantees, for a crash of the process or of the machine at any instant:

- a blob appears under its final name only complete and on disk: it is written to a
  temporary name, fsynced, renamed, and the folder is fsynced before anything refers
  to it;
- a checkpoint exists exactly when its manifest does: the manifest is written to a
  temporary name in the step folder and fsynced, *after* every blob it lists; then
  renamed into place (the commit) and the step folder fsynced, so the commit itself
  survives a power cut; every folder on the way is fsynced when it is created;
- a committed manifest is never replaced: writers of a run take ``<run>/.lock``
  (``flock``), under which a step folder without a manifest is known to be left over
  from a crash and is cleared;
- the blob collector never removes a blob a writer is about to reference: writers hold
  ``<root>/.lock`` shared from their first blob to their commit, the collector tries
  it exclusively and, if that fails, leaves collection to a later pass.

``flock`` locks die with their process, so a killed writer never leaves a lock behind
and no manual repair is ever needed. New folders are created 0700 and files 0600.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ft_notebook._paths import private_dir
from ft_notebook.exceptions import StoreError, StoreUnsafe, UnsafeName
from ft_notebook.store._codec import Buffer
from ft_notebook.store._faults import stage
from ft_notebook.store._io import run_all
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

_CHUNK = 64 << 20  # Linux writes at most 2 GiB per call; smaller calls keep memory flat
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


class LocalLocation(Location):
    def __init__(self, root: Path, *, trust: bool = False) -> None:
        root = root.expanduser().absolute()
        if not root.exists():
            private_dir(root)  # created 0700; an existing folder may be shared (no pickles then)
        elif not root.is_dir():
            raise StoreError(
                f"The checkpoint store {root} is a file, not a folder. Choose a folder."
            )
        self.root, self.trust = root, trust
        self.url = str(root)
        self._blobs = root / BLOBS

    # -- writing ---------------------------------------------------------------------

    def write_blobs(self, blobs: Sequence[Blob]) -> int:
        _mkdir(self._blobs)
        todo = [b for b in blobs if _size(self._blobs / b.key) != b.size]  # else written before
        tmps = [self._blobs / f".{b.key}.{uuid.uuid4().hex[:12]}.tmp" for b in todo]
        try:
            # Written and fsynced side by side; each is durable before its name appears.
            run_all(lambda i: _write_durably(tmps[i], todo[i].parts), range(len(todo)))
            stage("blobs-synced")
            for tmp, blob in zip(tmps, todo, strict=True):
                os.rename(tmp, self._blobs / blob.key)  # over a damaged blob of the same name, too
            stage("blobs-renamed")
            if todo:
                _fsync_dir(self._blobs)
            stage("blobs-dir-synced")
        except BaseException:
            for tmp in tmps:
                tmp.unlink(missing_ok=True)
            raise
        return sum(b.size for b in todo)

    def commit_manifest(self, run: str, step: int, data: bytes) -> None:
        folder = self._run(run) / step_dir(step)
        final = folder / NAME
        if final.exists():
            raise FileExistsError(17, "a checkpoint is committed there", str(final))
        if folder.exists():
            self._clear(folder)  # left by a writer that died: we hold the run's lock
        else:
            os.mkdir(folder, 0o700)
            _fsync_dir(folder.parent)
        stage("step-dir-created")
        tmp = folder / f".{NAME}.{uuid.uuid4().hex[:12]}.tmp"
        fd = os.open(tmp, _NEW_FILE, 0o600)
        try:
            try:
                _write_all(fd, [data], tmp)
                stage("manifest-written")
                _fsync(fd, tmp)
            finally:
                os.close(fd)
            stage("manifest-synced")
            os.rename(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        stage("manifest-committed")
        try:
            _fsync_dir(folder)
        except OSError as e:  # the commit is visible: "nothing was committed" would be wrong
            raise StoreError(
                f"Step {step} of run {run!r} is committed at {final}, but making the commit "
                f"durable failed ({e}): it loads now and may be lost if the machine loses "
                f"power. Check the disk (dmesg), then save again under a new step."
            ) from e
        stage("step-dir-synced")

    # -- reading ---------------------------------------------------------------------

    def read_manifest(self, run: str, step: int) -> bytes:
        return (self.root / run / step_dir(step) / NAME).read_bytes()

    def read_blob(self, key: str) -> memoryview:
        with open(self._blobs / key, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            # Uninitialised memory: bytearray(size) would zero every page before the read.
            buf = np.empty(size, dtype=np.uint8).data
            n = 0
            while n < size:
                got = f.readinto(buf[n:])
                if not got:
                    break
                n += got
            return buf[:n]

    def read_blob_into(self, key: str, out: memoryview) -> int:
        # straight into the caller's array: no second copy, no second set of pages
        with open(self._blobs / key, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            n, want = 0, min(size, len(out))
            while n < want:
                got = f.readinto(out[n:want])
                if not got:
                    break
                n += got
            return size if n == want else n

    def blob_size(self, key: str) -> int | None:
        return _size(self._blobs / key)

    def runs(self) -> list[str]:
        out = []
        for entry in _scan(self.root):
            try:
                if entry.is_dir() and run_name(entry.name):
                    out.append(entry.name)
            except UnsafeName:
                continue
        return out

    def steps(self, run: str) -> list[int]:
        steps = (parse_step_dir(e.name) for e in _scan(self.root / run) if e.is_dir())
        return [s for s in steps if s is not None]

    # -- removing --------------------------------------------------------------------

    def remove_manifest(self, run: str, step: int) -> bool:
        folder = self.root / run / step_dir(step)
        try:
            os.unlink(folder / NAME)
        except FileNotFoundError:
            return False
        _fsync_dir(folder)
        stage("checkpoint-uncommitted")
        return True

    def remove_step_dir(self, run: str, step: int) -> None:
        folder = self.root / run / step_dir(step)
        if not folder.exists():
            return
        self._clear(folder)
        os.rmdir(folder)
        _fsync_dir(folder.parent)
        stage("checkpoint-removed")

    def blob_names(self) -> list[str]:
        return [e.name for e in _scan(self._blobs)]

    def collectable(self, name: str) -> bool:
        return True  # the collector holds the root lock: no writer is between blob and commit

    def remove_blob(self, name: str) -> None:
        (self._blobs / name).unlink(missing_ok=True)
        stage("blob-removed")

    # -- locks and trust -------------------------------------------------------------

    @contextmanager
    def run_lock(self, run: str) -> Iterator[None]:
        with _flock(self._run(run) / ".lock", fcntl.LOCK_EX, LOCK_TIMEOUT_S) as got:
            assert got
            yield

    @contextmanager
    def writing(self) -> Iterator[None]:
        with _flock(self.root / ".lock", fcntl.LOCK_SH, LOCK_TIMEOUT_S) as got:
            assert got
            yield

    def collecting(self) -> AbstractContextManager[bool]:
        return _flock(self.root / ".lock", fcntl.LOCK_EX, 0.0)

    def check_private(self, action: str, run: str, step: int | None, keys: Sequence[str]) -> None:
        paths = [self.root, self.root / run, self._blobs]
        if step is not None:
            paths += [self.root / run / step_dir(step), self.root / run / step_dir(step) / NAME]
        paths += [self._blobs / k for k in keys]
        me = os.getuid()
        ancestors = [(a, False) for a in reversed(self.root.parents)]
        for p, ours in [*ancestors, *((p, True) for p in paths)]:
            try:
                info = p.stat()
            except FileNotFoundError:
                continue
            loose = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if ours:
                mine = info.st_uid == me
            else:  # a folder above: root may own it; in a sticky one (/tmp) others
                mine = info.st_uid in (me, 0)  # cannot rename ours away
                loose = loose and not info.st_mode & stat.S_ISVTX
            if not mine:
                why = f"it belongs to uid {info.st_uid}, not to you (uid {me})"
            elif loose:
                why = f"its mode {stat.filemode(info.st_mode)} lets other users write to it"
            else:
                continue
            raise StoreUnsafe(
                f"Refusing to {action} pickled objects at {p}: {why}. Unpickling runs "
                f"code named in the data, so whoever can change it could run code as "
                f"you. Run `chmod go-w {p}`, or keep snapshots in a folder of your own "
                f"(the default data dir is private)."
            )

    def check_author(self, run: str, step: int) -> None:
        # the manifest names and hashes every blob, so whoever wrote the manifest (or
        # could replace it, or the folders that hold it) chose the state loaded
        if self.trust:
            return
        me, folder = os.getuid(), self.root / run / step_dir(step)
        for p in (self.root / run, folder, folder / NAME):
            try:
                info = p.stat()
            except FileNotFoundError:
                continue
            if info.st_uid != me:
                why = f"it belongs to uid {info.st_uid}{_user(info.st_uid)}, not to you (uid {me})"
            elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                why = f"its mode {stat.filemode(info.st_mode)} lets other users write to it"
            else:
                continue
            raise StoreUnsafe(
                f"Refusing to load step {step} of run {run!r} at {p}: {why}, so another "
                f"user may have written this checkpoint. Load it only if you trust them: "
                f"CheckpointStore({self.url!r}, trust=True). Otherwise remove that step "
                f"(or `chmod go-w {p}` if it is yours), or keep checkpoints in a folder of "
                f"your own; an older step of yours loads with load({run!r}, step=N)."
            )

    # -- helpers ---------------------------------------------------------------------

    def _run(self, run: str) -> Path:
        folder = self.root / run
        _mkdir(folder)
        return folder

    def _clear(self, folder: Path) -> None:
        for entry in _scan(folder):
            if entry.name == NAME:
                raise StoreError(f"{folder} holds a manifest; refusing to clear it")
            os.unlink(entry.path)


def _user(uid: int) -> str:
    import pwd

    try:
        return f" ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return ""


def _write_durably(path: Path, parts: Sequence[Buffer]) -> None:
    """Create ``path`` with ``parts`` and fsync it."""
    fd = os.open(path, _NEW_FILE, 0o600)
    try:
        _write_all(fd, parts, path)
        stage("blobs-written")
        _fsync(fd, path)
    finally:
        os.close(fd)


def _write_all(fd: int, parts: Sequence[Buffer], path: Path) -> None:
    """Write every part; an OSError (ENOSPC, EIO) names ``path``."""
    try:
        for part in parts:
            view = memoryview(part).cast("B")
            while view:
                view = view[os.write(fd, view[:_CHUNK]) :]
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from e


def _fsync(fd: int, path: Path) -> None:
    try:
        os.fsync(fd)
    except OSError as e:  # delayed allocation can report ENOSPC only here
        raise OSError(e.errno, e.strerror, str(path)) from e


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _mkdir(path: Path) -> None:
    """Create ``path`` 0700 if missing, durably (its parent is fsynced)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    _fsync_dir(path.parent)


def _size(path: Path) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def _scan(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except FileNotFoundError:
        return []


@contextmanager
def _flock(path: Path, op: int, timeout: float) -> Iterator[bool]:
    """Hold ``flock(op)`` on ``path``; yields False if it was not free within ``timeout``
    (0: only try once). Raises StoreError when a positive timeout runs out."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + timeout
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, op | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if timeout == 0:
                    yield False
                    return
                if time.monotonic() > deadline:
                    raise StoreError(
                        f"Waited {timeout:.0f} s for the lock {path}; another process "
                        f"holds it (a save, delete or collection that hangs on this "
                        f"storage). Find it with `fuser {path}`, then try again."
                    ) from None
                time.sleep(pause)  # a lock has no wake-up; back off gently
                pause = min(pause * 2, 0.05)
        yield True
    finally:
        os.close(fd)  # releases the lock
