"""Reading a checkpoint back, and proving it is the one that was written.

A copy of a checkpoint at one location counts only if its manifest is valid (see
:mod:`._manifest`) and every file it lists is there with the listed size and xxh3-128
hash; only then is anything decoded. Anything else is :class:`Damaged`, with a reason
short enough for an event and precise enough to act on ("blobs/ab….safetensors has
1200 bytes, the manifest says 1300"). Deciding what to do about damage (another
location, an older step, an event) is the store's business, not this module's.
"""

from __future__ import annotations

import xxhash

from ft_notebook.exceptions import StoreError
from ft_notebook.store._codec import decode_state
from ft_notebook.store._io import run_all
from ft_notebook.store._location import Location
from ft_notebook.store._manifest import FileEntry, InvalidManifest, Manifest
from ft_notebook.store._types import Checkpoint, CheckpointInfo
from ft_notebook.store._values import Malformed, decode


class Damaged(Exception):
    """This location's copy of a checkpoint does not verify; str() says why."""


def read_manifest(loc: Location, run: str, step: int) -> Manifest:
    """The valid manifest of ``run``/``step``; FileNotFoundError if there is none."""
    try:
        raw = loc.read_manifest(run, step)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise Damaged(f"manifest.json cannot be read: {e}") from e
    try:
        return Manifest.from_bytes(raw, run=run, step=step)
    except InvalidManifest as e:
        raise Damaged(str(e)) from e


def read_files(loc: Location, manifest: Manifest, *, keep: bool) -> dict[str, memoryview]:
    """Read and check every file ``manifest`` lists, side by side (reads and xxh3
    release the GIL); return them if ``keep``. Raises the first Damaged found."""

    def check(item: tuple[str, FileEntry]) -> tuple[str, memoryview | None]:
        key, entry = item
        try:
            buf = loc.read_blob(key)
        except FileNotFoundError:
            raise Damaged(f"blobs/{key} is missing") from None
        except OSError as e:
            raise Damaged(f"blobs/{key} cannot be read: {e}") from e
        if len(buf) != entry.size:
            raise Damaged(
                f"blobs/{key} has {len(buf)} bytes, the manifest says {entry.size} "
                f"(truncated or overwritten)"
            )
        digest = xxhash.xxh3_128(buf).hexdigest()
        if digest != entry.xxh3_128:
            raise Damaged(
                f"blobs/{key} has content hash {digest}, not the manifest's (bytes changed)"
            )
        return key, buf if keep else None

    return {k: b for k, b in run_all(check, list(manifest.files.items())) if b is not None}


def load_from(loc: Location, run: str, step: int, *, allow_pickle: bool) -> Checkpoint:
    """The verified checkpoint ``run``/``step`` at ``loc``; raises Damaged,
    FileNotFoundError (no manifest), StoreError/StoreUnsafe (pickles not allowed)."""
    manifest = read_manifest(loc, run, step)
    if manifest.has_pickles:
        if not allow_pickle:
            raise StoreError(
                f"Step {step} of run {run!r} at {loc.url} holds pickled objects (a "
                f"notebook snapshot). Pickle runs code named in the data: load it with "
                f"allow_pickle=True only if you trust this location."
            )
        pickles = [k for k in manifest.files if k.endswith(".pkl")]
        loc.check_private("load", run, step, pickles)
    else:  # no code runs, but the state would be whatever its writer chose
        loc.check_author(run, step)
    buffers = read_files(loc, manifest, keep=True)
    try:
        state = decode_state(buffers[manifest.state], buffers, allow_pickle=allow_pickle)
        metadata = decode(manifest.metadata)
    except Malformed as e:
        raise Damaged(
            f"its files verify but do not decode ({e}); it was not written by this version"
        ) from e
    return Checkpoint(**vars(describe(manifest, loc.url, metadata)), state=state)


def describe(manifest: Manifest, url: str, metadata: object = None) -> CheckpointInfo:
    """What the store tells about a checkpoint, from its manifest found at ``url``."""
    if metadata is None:
        try:
            metadata = decode(manifest.metadata)
        except Malformed:  # the manifest's hash matched: only a forged one gets here
            metadata = {}
    return CheckpointInfo(
        run=manifest.run,
        step=manifest.step,
        time=manifest.time,
        nbytes=manifest.nbytes,
        pinned=manifest.pinned,
        metadata=metadata if isinstance(metadata, dict) else {},
        location=url,
    )
