"""One place checkpoints are kept, and the layout every place shares.

::

    <root>/blobs/<xxh3-128>.<safetensors|json|pkl>   content-addressed, shared by all runs
    <root>/<run>/<step:012d>/manifest.json            the commit of one checkpoint
    <root>/.lock                                      local: writers (shared) vs collector
    <root>/<run>/.lock                                local: writers of one run

A :class:`Location` is the contract between the store and a backend: it writes blobs
durably before it returns, commits a manifest atomically and exclusively (a committed
checkpoint is never replaced), and offers the locks that keep writers, deleters and
the blob collector from corrupting each other. :mod:`._local` implements it with
``os`` calls, ``fsync`` and ``flock``; :mod:`._fsspec` with any fsspec filesystem.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from ft_notebook._paths import checked_name
from ft_notebook.exceptions import StoreError, UnsafeName

if TYPE_CHECKING:
    from ft_notebook.store._encode import Blob

BLOBS = "blobs"
MAX_STEP = 10**12 - 1
LOCK_TIMEOUT_S = 300.0
_STEP_DIR = re.compile(r"[0-9]{12}")


def run_name(run: object) -> str:
    name = checked_name(run, "run name")
    if name == BLOBS:
        raise UnsafeName(
            f"The run name {name!r} is reserved: the checkpoint store keeps shared data "
            f"in a folder of that name. Choose another run name."
        )
    return name


def checked_step(step: object) -> int:
    """``step`` as an int if it can name a checkpoint folder, else StoreError."""
    value = None if isinstance(step, bool) else getattr(step, "__index__", lambda: None)()
    if not isinstance(value, int) or not 0 <= value <= MAX_STEP:
        raise StoreError(
            f"A checkpoint step must be an int from 0 to {MAX_STEP}, got {step!r} "
            f"({type(step).__name__}). Pass the training step (or any counter that grows)."
        )
    return value


def step_dir(step: int) -> str:
    return f"{step:012d}"


def parse_step_dir(name: str) -> int | None:
    return int(name) if _STEP_DIR.fullmatch(name) else None


class Location(abc.ABC):
    """A root where checkpoints live: a local folder or any fsspec URL."""

    #: How the user named it, for messages and events.
    url: str

    # -- writing ---------------------------------------------------------------------

    @abc.abstractmethod
    def write_blobs(self, blobs: Sequence[Blob]) -> int:
        """Make every blob durable under its key, skipping those already there with the
        right size; return the bytes written. Raises OSError naming the file."""

    @abc.abstractmethod
    def commit_manifest(self, run: str, step: int, data: bytes) -> None:
        """Commit a checkpoint, atomically; FileExistsError if one is committed there.
        The caller holds :meth:`run_lock`."""

    # -- reading ---------------------------------------------------------------------

    @abc.abstractmethod
    def read_manifest(self, run: str, step: int) -> bytes:
        """The manifest's bytes; FileNotFoundError if the step has none."""

    @abc.abstractmethod
    def read_blob(self, key: str) -> memoryview:
        """A blob's bytes, in writable memory the loaded tensors will share;
        FileNotFoundError if missing."""

    def read_blob_into(self, key: str, out: memoryview) -> int:
        """Read a blob into ``out`` (bytes) and return how many bytes the blob has, as
        far as the read could tell: a number other than ``len(out)`` means the blob is
        not the size expected (``out`` then holds what fitted). FileNotFoundError if
        missing. Locations that can read into place override this copy."""
        data = self.read_blob(key)
        n = min(len(data), len(out))
        out[:n] = data[:n]
        return len(data)

    @abc.abstractmethod
    def blob_size(self, key: str) -> int | None:
        """A blob's size, or None if it is missing."""

    @abc.abstractmethod
    def runs(self) -> list[str]:
        """Names of the runs that have a folder here."""

    @abc.abstractmethod
    def steps(self, run: str) -> list[int]:
        """Steps that have a folder in ``run``, committed or not, in no order."""

    # -- removing --------------------------------------------------------------------

    @abc.abstractmethod
    def remove_manifest(self, run: str, step: int) -> bool:
        """Uncommit a checkpoint; False if it had no manifest. Caller holds run_lock."""

    @abc.abstractmethod
    def remove_step_dir(self, run: str, step: int) -> None:
        """Remove a step folder that holds no manifest. Caller holds run_lock."""

    @abc.abstractmethod
    def blob_names(self) -> list[str]:
        """Every name in the blob area (blobs and leftovers of interrupted writes)."""

    @abc.abstractmethod
    def collectable(self, name: str) -> bool:
        """Whether an unreferenced entry of the blob area may be removed now."""

    @abc.abstractmethod
    def remove_blob(self, name: str) -> None: ...

    # -- locks and trust -------------------------------------------------------------

    @abc.abstractmethod
    def run_lock(self, run: str) -> AbstractContextManager[None]:
        """Exclusive among writers and deleters of ``run``."""

    @abc.abstractmethod
    def writing(self) -> AbstractContextManager[None]:
        """Held by a writer from its first blob to its commit: the collector waits."""

    @abc.abstractmethod
    def collecting(self) -> AbstractContextManager[bool]:
        """Yields True if no writer holds :meth:`writing` (and keeps them out)."""

    @abc.abstractmethod
    def check_private(self, action: str, run: str, step: int | None, keys: Sequence[str]) -> None:
        """Raise StoreUnsafe unless only this user can change what pickle would read."""

    @abc.abstractmethod
    def check_author(self, run: str, step: int) -> None:
        """Raise StoreUnsafe if another user could have written checkpoint ``step`` of
        ``run`` (its manifest, which names and hashes every file), unless the store was
        opened with ``trust=True``. Locations that cannot tell who wrote a file (object
        stores) leave it to whoever grants access to them."""
