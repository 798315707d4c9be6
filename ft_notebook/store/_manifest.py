"""The manifest: the one file whose arrival commits a checkpoint.

``<run>/<step:012d>/manifest.json`` lists every file of the checkpoint with its size
and xxh3-128 hash, the step, the wall time, whether it is pinned and the caller's
metadata, and carries the hash of all that. It is written after everything it lists,
so a checkpoint without a valid manifest does not exist for any reader.

A manifest is valid only if all of these hold, so that any damage to it is seen:

- it is canonical JSON (sorted keys, fixed spacing): re-encoding what was parsed gives
  the very same bytes, which catches edits JSON would forgive (``1.0`` -> ``1e0``);
- its own hash matches, which catches any changed value;
- its run and step are those of the folder it lies in (a manifest copied or moved to
  another step is invalid).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import xxhash

from ft_notebook.store._codec import BLOB_KEY

FORMAT = "ft-notebook-checkpoint/1"
NAME = "manifest.json"
_HASH = "manifest_xxh3_128"
_HEX = re.compile(r"[0-9a-f]{32}")
_KEYS = re.compile(rb"[0-9a-f]{32}\.(?:safetensors|json|pkl|bin)")


class InvalidManifest(ValueError):
    """A manifest that does not count; the message says why, for the skipped event."""


# NamedTuples rather than frozen dataclasses: every restore in a fresh kernel creates
# these classes, and a frozen dataclass takes 0.5 ms to create against 0.1 ms (a
# restore must beat re-running a small notebook; see bench_snapshots.py).


class FileEntry(NamedTuple):
    """A file a checkpoint references: its size and its content hash."""

    size: int
    xxh3_128: str


class Manifest(NamedTuple):
    """What a committed checkpoint is: its files, state file, metadata and time."""

    run: str
    step: int
    time: float
    pinned: bool
    #: The caller's metadata in the encoding of :mod:`._values`.
    metadata: Any
    #: The key of the state's JSON file, one of ``files``.
    state: str
    files: Mapping[str, FileEntry]

    @property
    def nbytes(self) -> int:
        return sum(f.size for f in self.files.values())

    @property
    def has_pickles(self) -> bool:
        return any(k.endswith(".pkl") for k in self.files)

    def body(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "run": self.run,
            "step": self.step,
            "time": self.time,
            "pinned": self.pinned,
            "metadata": self.metadata,
            "state": self.state,
            "files": {k: {"size": f.size, "xxh3_128": f.xxh3_128} for k, f in self.files.items()},
        }

    def to_bytes(self) -> bytes:
        body = self.body()
        body[_HASH] = _digest(body)
        return _canonical(body)

    @property
    def digest(self) -> str:
        return _digest(self.body())

    @classmethod
    def from_bytes(cls, raw: bytes, *, run: str, step: int) -> Manifest:
        """The manifest in ``raw``, found at ``run``/``step``; raises InvalidManifest."""
        try:
            doc = json.loads(raw)
        except ValueError as e:  # UnicodeDecodeError too
            raise InvalidManifest(f"manifest.json is not valid JSON ({len(raw)} bytes): {e}") from e
        if not isinstance(doc, dict):
            raise InvalidManifest(f"manifest.json holds a {type(doc).__name__}, not an object")
        try:
            canonical = _canonical(doc)
        except ValueError as e:
            raise InvalidManifest(f"manifest.json holds values JSON forbids: {e}") from e
        if canonical != raw:
            raise InvalidManifest("manifest.json is not in canonical form: its bytes were altered")
        recorded = doc.pop(_HASH, None)
        computed = _digest(doc)
        if recorded != computed:
            raise InvalidManifest(
                f"manifest.json's own hash does not match (recorded {recorded!r}, "
                f"computed {computed!r}): its content was altered"
            )
        return cls._from_doc(doc, run=run, step=step)

    @classmethod
    def _from_doc(cls, doc: dict[str, Any], *, run: str, step: int) -> Manifest:
        if doc.get("format") != FORMAT:
            raise InvalidManifest(f"manifest.json has format {doc.get('format')!r}, not {FORMAT!r}")
        if doc.get("run") != run or doc.get("step") != step or type(doc.get("step")) is not int:
            raise InvalidManifest(
                f"manifest.json says run {doc.get('run')!r} step {doc.get('step')!r} but lies "
                f"in the folder of run {run!r} step {step}"
            )
        when, pinned = doc.get("time"), doc.get("pinned")
        if (
            not isinstance(when, (int, float))
            or not math.isfinite(when)
            or type(pinned) is not bool
        ):
            raise InvalidManifest(
                f"manifest.json has a bad time {when!r} or pinned flag {pinned!r}"
            )
        state, files = doc.get("state"), doc.get("files")
        if not isinstance(files, dict) or state not in files:
            raise InvalidManifest("manifest.json does not list the state file among its files")
        entries: dict[str, FileEntry] = {}
        for key, info in files.items():
            if not isinstance(info, dict) or not BLOB_KEY.fullmatch(key):
                raise InvalidManifest(f"manifest.json lists a bad file entry {key!r}: {info!r}")
            size, digest = info.get("size"), info.get("xxh3_128")
            if type(size) is not int or size < 0 or not isinstance(digest, str):
                raise InvalidManifest(f"manifest.json lists a bad file entry {key!r}: {info!r}")
            if not _HEX.fullmatch(digest) or not key.startswith(digest + "."):
                raise InvalidManifest(f"manifest.json lists a bad file entry {key!r}: {info!r}")
            entries[key] = FileEntry(size, digest)
        return cls(run, step, float(when), pinned, doc.get("metadata"), str(state), entries)


def referenced(raw: bytes) -> set[str]:
    """Every blob key ``raw`` names, read as text so that a damaged manifest counts too:
    the collector must not delete data a manifest that fails today may still need."""
    return {m.decode() for m in _KEYS.findall(raw)}


def _canonical(doc: Mapping[str, Any]) -> bytes:
    return (
        json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=True, allow_nan=False).encode()
        + b"\n"
    )


def _digest(body: Mapping[str, Any]) -> str:
    return xxhash.xxh3_128(_canonical(body)).hexdigest()
