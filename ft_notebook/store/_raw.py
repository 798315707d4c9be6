"""Checkpoints made of the caller's own content-addressed blobs.

Notebook snapshots split a namespace into pickles and buffers and hash them while
looking for changes; they hand those blobs over as they are (``<xxh3-128>.pkl`` and
``.bin``) and name the blobs of earlier snapshots they still need, so unchanged data
is neither hashed nor written again. The checkpoint they make has the same manifest,
commit protocol, retention and blob collection as any other; only the payload is the
caller's to interpret. Reads verify each blob against the manifest when it is read.
This module reads them; :mod:`._encode` turns the caller's blobs into files to write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import xxhash

from ft_notebook.exceptions import CheckpointCorrupt, StoreError
from ft_notebook.store._codec import decode_state
from ft_notebook.store._location import Location
from ft_notebook.store._manifest import Manifest
from ft_notebook.store._reader import Damaged, describe, read_manifest
from ft_notebook.store._types import CheckpointInfo
from ft_notebook.store._values import Malformed


class RawCheckpoint:
    """A committed raw checkpoint: its description, its state, and its blobs on demand.

    A plain class, not a frozen dataclass: creating one of those costs every restore in
    a fresh kernel 0.5 ms (see :mod:`._manifest`)."""

    __slots__ = ("_read", "_read_into", "info", "sizes", "state")

    def __init__(
        self,
        info: CheckpointInfo,
        state: dict[str, Any],
        sizes: Mapping[str, int],
        read: Callable[[str], memoryview],
        read_into: Callable[[str, memoryview], None],
    ) -> None:
        self.info = info
        self.state = state
        self.sizes = sizes
        self._read = read
        self._read_into = read_into

    def __repr__(self) -> str:
        return f"RawCheckpoint(run={self.info.run!r}, step={self.info.step})"

    def read(self, key: str) -> memoryview:
        """The blob ``key``, verified against the manifest (StoreError if it is not)."""
        self._check_part(key)
        return self._read(key)

    def read_into(self, key: str, out: memoryview) -> None:
        """Read the blob ``key`` into ``out``, which must be its size, and verify it
        there: a large array is rebuilt without a copy of its bytes in between.
        CheckpointCorrupt if it does not verify (``out`` then holds garbage)."""
        self._check_part(key)
        if out.nbytes != self.sizes[key]:
            raise StoreError(f"Blob {key} has {self.sizes[key]} bytes, not {out.nbytes}.")
        self._read_into(key, out)

    def _check_part(self, key: str) -> None:
        if key not in self.sizes:
            raise StoreError(
                f"Blob {key} is not part of step {self.info.step} of run {self.info.run!r}."
            )


def read_state(loc: Location, run: str, step: int) -> tuple[Manifest, dict[str, Any]]:
    """The manifest and decoded state of a raw checkpoint; Damaged if either is."""
    manifest = read_manifest(loc, run, step)
    buf = read_verified(loc, manifest, manifest.state)
    try:
        state = decode_state(buf, {manifest.state: buf}, allow_pickle=False)
    except Malformed as e:
        raise Damaged(f"its state file does not decode ({e})") from e
    return manifest, state


def read_verified(loc: Location, manifest: Manifest, key: str) -> memoryview:
    try:
        buf = loc.read_blob(key)
    except FileNotFoundError:
        raise Damaged(f"blobs/{key} is missing") from None
    except OSError as e:
        raise Damaged(f"blobs/{key} cannot be read: {e}") from e
    _verify(manifest, key, len(buf), buf)
    return memoryview(buf)


def read_verified_into(loc: Location, manifest: Manifest, key: str, out: memoryview) -> None:
    try:
        size = loc.read_blob_into(key, out)
    except FileNotFoundError:
        raise Damaged(f"blobs/{key} is missing") from None
    except OSError as e:
        raise Damaged(f"blobs/{key} cannot be read: {e}") from e
    _verify(manifest, key, size, out)


def _verify(manifest: Manifest, key: str, size: int, data: memoryview) -> None:
    entry = manifest.files[key]
    if size != entry.size or xxhash.xxh3_128(data).hexdigest() != entry.xxh3_128:
        raise Damaged(f"blobs/{key} does not match the manifest (truncated or changed)")


def open_first(
    locations: Sequence[Location], run: str, steps: Sequence[int], *, allow_pickle: bool
) -> RawCheckpoint | None:
    """The first of ``steps`` whose manifest and state verify at some location; None
    if none of them exists anywhere. Raises CheckpointCorrupt if some exist but none
    verifies, StoreError/StoreUnsafe for pickles that may not be read."""
    reasons: list[str] = []
    for step in steps:
        for loc in locations:
            try:
                manifest, state = read_state(loc, run, step)
            except FileNotFoundError:
                continue
            except Damaged as e:
                reasons.append(f"step {step} at {loc.url}: {e}")
                continue
            if manifest.has_pickles and not allow_pickle:
                raise StoreError(
                    f"Step {step} of run {run!r} holds pickles; pass allow_pickle=True "
                    f"only for a location you trust."
                )
            if allow_pickle:
                # the caller runs what it reads: pickles, and what a snapshot's state
                # names (cells it replays, modules it imports), even with no pickle at
                # all; only this user may have been able to write any of it
                loc.check_private("load", run, step, list(manifest.files))
            else:
                loc.check_author(run, step)
            sizes = {k: e.size for k, e in manifest.files.items()}
            read, read_into = _readers(loc, manifest)
            return RawCheckpoint(describe(manifest, loc.url), state, sizes, read, read_into)
    if reasons:
        raise CheckpointCorrupt(f"No checkpoint of run {run!r} verifies: {'; '.join(reasons)}.")
    return None


def _readers(
    loc: Location, manifest: Manifest
) -> tuple[Callable[[str], memoryview], Callable[[str, memoryview], None]]:
    def corrupt(e: Damaged) -> CheckpointCorrupt:
        return CheckpointCorrupt(
            f"Step {manifest.step} of run {manifest.run!r} at {loc.url}: {e}. Restore "
            f"an older snapshot."
        )

    def read(key: str) -> memoryview:
        try:
            return read_verified(loc, manifest, key)
        except Damaged as e:
            raise corrupt(e) from e

    def read_into(key: str, out: memoryview) -> None:
        try:
            read_verified_into(loc, manifest, key, out)
        except Damaged as e:
            raise corrupt(e) from e

    return read, read_into
