"""Taking a state apart into the files a checkpoint is written as.

The writing half of :mod:`._codec` (which describes the files and reads them back):
:func:`prepare` checks a save and encodes its state, :func:`to_blobs` hashes the
pieces into content-addressed files. Raw checkpoints (notebook snapshots) bring their
own hashed blobs: :func:`raw_blobs`, :func:`state_blob` and :func:`reused_entries`
turn those into files and manifest entries. It loads with the first save, so a
process that only reads checkpoints (a notebook restore) never builds it.
"""

from __future__ import annotations

import json
import pickle
import sys
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from ft_notebook.exceptions import StoreError
from ft_notebook.store._codec import BLOB_KEY, PACK_BELOW, STATE_FORMAT, Buffer
from ft_notebook.store._io import run_all
from ft_notebook.store._manifest import FileEntry
from ft_notebook.store._values import TAG, encode

if TYPE_CHECKING:
    from ft_notebook.store import _tensors
    from ft_notebook.store._location import Location

RAW_EXTENSIONS = ("pkl", "bin")


@dataclass(frozen=True)
class Blob:
    """One file to write: its name, its size and its bytes, in pieces."""

    key: str
    size: int
    parts: tuple[Buffer, ...]


@dataclass
class Encoded:
    """A state taken apart: the JSON tree and the leaves stored beside it."""

    tree: Any
    #: (kind, payload) per leaf: a Raw for "tensor", "ndarray", "npscalar"; bytes for "pickle".
    leaves: list[tuple[str, _tensors.Raw | bytes]] = field(default_factory=list)
    #: Where the copies of an asynchronous save live (None: the caller's memory).
    stage: _tensors.Stage | None = None


@dataclass(frozen=True)
class Job:
    """A save, taken apart and ready to be written."""

    run: str
    step: int
    state: Encoded
    metadata: Any
    pin: bool


def prepare(
    run: str,
    step: int,
    state: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
    pin: bool,
    allow_pickle: bool,
    stage: _tensors.Stage | None,
) -> Job:
    """Check and take apart what the caller asked to save (see :func:`encode_state`)."""
    if not isinstance(state, Mapping):
        raise StoreError(
            f"The state to save must be a dict (of tensors, arrays and plain values), "
            f"got a {type(state).__name__}. Wrap it: {{'model': ...}}."
        )
    if metadata is not None and not isinstance(metadata, Mapping):
        raise StoreError(
            f"metadata must be a dict of plain values, got a {type(metadata).__name__}."
        )
    meta = encode(dict(metadata or {}), "metadata")
    if type(state) not in (dict, OrderedDict):
        state = dict(state)
    return Job(run, step, encode_state(state, allow_pickle=allow_pickle, stage=stage), meta, pin)


def encode_state(
    state: Mapping[str, Any], *, allow_pickle: bool, stage: _tensors.Stage | None = None
) -> Encoded:
    """Take ``state`` apart. With ``stage`` (an asynchronous save), tensors and arrays
    are copied into its buffers, so nothing in the result aliases the caller's memory
    and the caller may change its tensors as soon as this returns."""
    from ft_notebook.store import _tensors

    enc = Encoded(tree=None, stage=stage)

    def add(kind: str, payload: _tensors.Raw | bytes) -> dict[str, Any]:
        enc.leaves.append((kind, payload))
        return {TAG: kind, "i": len(enc.leaves) - 1}

    def leaf(obj: object, path: str) -> dict[str, Any] | None:
        torch = sys.modules.get("torch")  # a tensor exists only if torch was imported
        if torch is not None:
            if isinstance(obj, torch.Tensor):
                return add("tensor", _tensors.torch_raw(obj, path=path, stage=stage))
            if type(obj) is torch.Size:
                assert isinstance(obj, tuple)
                return {TAG: "size", "v": [int(n) for n in obj]}
            if isinstance(obj, torch.dtype):
                return {TAG: "dtype", "v": str(obj).removeprefix("torch.")}
        if type(obj) is np.ndarray and not (allow_pickle and not _tensors.numpy_supported(obj)):
            return add("ndarray", _tensors.numpy_raw(obj, path=path, stage=stage))
        if isinstance(obj, np.generic) and _tensors.numpy_supported(np.asarray(obj)):
            return add("npscalar", _tensors.numpy_raw(np.asarray(obj), path=path))
        if allow_pickle:
            return add("pickle", _pickled(obj, path))
        return None

    enc.tree = encode(state, "state", leaf)
    return enc


def to_blobs(enc: Encoded, pack_below: int = PACK_BELOW) -> tuple[list[Blob], str]:
    """The files that hold ``enc`` and the name of its JSON file (the last blob)."""
    for wait in enc.stage.waits if enc.stage is not None else ():
        wait()
    files: list[tuple[list[Buffer], str]] = []  # (parts, extension), hashed below
    where: list[tuple[int, str | None]] = []  # per leaf: (index in files, name inside)
    small: list[_tensors.Raw] = []
    for _, payload in enc.leaves:
        if isinstance(payload, bytes):
            files.append(([payload], "pkl"))
            where.append((len(files) - 1, None))
        elif payload.nbytes >= pack_below:
            files.append((_safetensors([payload]), "safetensors"))
            where.append((len(files) - 1, "0"))
        else:
            small.append(payload)
            where.append((-1, str(len(small) - 1)))  # -1: the pack, appended last
    if small:
        files.append((_safetensors(small), "safetensors"))
    blobs = run_all(lambda f: _blob(*f), files)  # xxh3 releases the GIL: hashed side by side
    refs = [[blobs[index].key, name] for index, name in where]
    doc = {"format": STATE_FORMAT, "tree": enc.tree, "leaves": refs}
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()
    state = _blob([text], "json")
    unique = {b.key: b for b in blobs}  # equal tensors are one file
    return [*unique.values(), state], state.key


def raw_blobs(blobs: Mapping[str, Buffer]) -> list[Blob]:
    """The caller's blobs as files to write; their keys are checked, not their bytes
    (a wrong hash is caught by the first read, as any damage would be)."""
    out = []
    for key, data in blobs.items():
        _check_key(key)
        view = memoryview(data).cast("B")
        out.append(Blob(key, view.nbytes, (view,)))
    return out


def state_blob(state: Mapping[str, Any]) -> Blob:
    """The JSON file of a raw checkpoint: the caller's description of its blobs."""
    doc = {"format": STATE_FORMAT, "tree": encode(dict(state), "state"), "leaves": []}
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()
    return Blob(f"{xxhash.xxh3_128(text).hexdigest()}.json", len(text), (text,))


def reused_entries(loc: Location, reuse: Mapping[str, int]) -> dict[str, FileEntry]:
    """Manifest entries for blobs an earlier checkpoint wrote; each must be there."""
    entries = {}
    for key, size in reuse.items():
        _check_key(key)
        found = loc.blob_size(key)
        if found != size:
            seen = "missing" if found is None else f"{found} bytes, not {size}"
            raise StoreError(
                f"The blob {key} this checkpoint reuses is {seen} at {loc.url}. Save it "
                f"again without reusing (a full snapshot)."
            )
        entries[key] = FileEntry(size, key.split(".", 1)[0])
    return entries


def _pickled(obj: object, path: str) -> bytes:
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # pickle raises many kinds: PicklingError, TypeError, AttributeError
        raise StoreError(
            f"Cannot save {path}: pickling its {type(obj).__qualname__} failed ({e}). "
            f"Leave it out of the state, or give its class __getstate__/__reduce__."
        ) from e


def _safetensors(raws: list[_tensors.Raw]) -> list[Buffer]:
    from ft_notebook.store import _tensors

    head, order = _tensors.header(raws)
    return [head, *(raws[i].data for i in order)]


def _blob(parts: list[Buffer], ext: str) -> Blob:
    h = xxhash.xxh3_128()
    size = 0
    for p in parts:
        h.update(p)
        size += p.nbytes if isinstance(p, memoryview) else len(p)
    return Blob(f"{h.hexdigest()}.{ext}", size, tuple(parts))


def _check_key(key: str) -> None:
    if not BLOB_KEY.fullmatch(key) or key.rsplit(".", 1)[1] not in RAW_EXTENSIONS:
        raise StoreError(
            f"A raw blob key must be '<32 hex digits of its xxh3-128>.pkl' or '.bin', got {key!r}."
        )
