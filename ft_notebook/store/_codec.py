"""A checkpoint's state as content-addressed files, and back.

A state is split three ways:

- tensors and arrays go to safetensors files. One of at least ``PACK_BELOW`` bytes
  gets a file of its own, so a tensor that did not change since the last checkpoint (a
  frozen embedding, a base model under fine-tuning) is the same file and is written
  once; smaller ones (biases, step counters, RNG states) share one file, so a model
  with hundreds of small tensors does not cost hundreds of files;
- objects only pickle can store (notebook snapshots, opt-in) go to one file each;
- the structure and every other value go to one JSON file (see :mod:`._values`).

Every file is named ``<xxh3-128 of its bytes>.<safetensors|json|pkl>``: equal bytes
are one file, and the name is checked against the bytes on every read. The JSON file
lists, for each tensor, the file and the name inside it where it lives.
"""

from __future__ import annotations

import json
import pickle
import re
import sys
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import xxhash

from ft_notebook.exceptions import StoreError
from ft_notebook.store._io import run_all
from ft_notebook.store._values import TAG, Malformed, decode, encode

if TYPE_CHECKING:
    # loaded where tensors are encoded or decoded: a notebook restore reads none
    from ft_notebook.store import _tensors

PACK_BELOW = 1 << 20
STATE_FORMAT = "ft-notebook-state/1"
# .bin: opaque bytes a caller hashed itself (notebook snapshots' buffers); never decoded
BLOB_KEY = re.compile(r"[0-9a-f]{32}\.(?:safetensors|json|pkl|bin)")

Buffer: TypeAlias = "bytes | memoryview"


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


def decode_state(
    state: memoryview, buffers: Mapping[str, memoryview], *, allow_pickle: bool
) -> dict[str, Any]:
    """The state whose JSON file is ``state``, its other files read into ``buffers``.

    Tensors and arrays share the buffers' memory. Raises :class:`Malformed` when the
    files do not fit together (they were verified against their hashes before, so only
    a bug or a forged checkpoint gets here).
    """
    try:
        doc = json.loads(bytes(state))
        if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
            raise Malformed(f"the state file's format is not {STATE_FORMAT!r}")
        leaves = doc["leaves"]
        parsed: dict[str, dict[str, _tensors.Entry]] = {}
        used: set[tuple[str, str]] = set()

        def leaf(tag: Mapping[str, Any]) -> object:
            kind = tag[TAG]
            if kind in ("size", "dtype"):
                return _torch_value(kind, tag["v"])
            key, name = leaves[tag["i"]]
            buf = buffers[key]
            if kind == "pickle":
                if not allow_pickle:
                    raise StoreError(
                        "the checkpoint holds pickled objects; load it with allow_pickle=True"
                    )
                return _unpickled(buf, key)
            from ft_notebook.store import _tensors  # a state without tensors never needs it

            if key not in parsed:
                parsed[key] = _tensors.parse(buf)
            entry = parsed[key][name]
            # Equal tensors share a blob (two zero-initialised Adam moments, say); each
            # but the first gets its own memory, or an in-place update of one would
            # change the other.
            alias = (key, name) in used
            used.add((key, name))
            if kind == "tensor":
                t = _tensors.to_torch(buf, entry)
                return t.clone() if alias else t
            array = _tensors.to_numpy(buf, entry)
            if kind == "npscalar":
                return array[()]
            return array.copy() if alias else array

        out = decode(doc["tree"], leaf)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise Malformed(f"the state does not decode: {e!r}") from e
    if not isinstance(out, dict):
        raise Malformed(f"the state is a {type(out).__name__}, not a dict")
    return out


def _torch_value(kind: str, v: Any) -> object:
    import torch

    if kind == "size":
        return torch.Size(v)
    dtype = getattr(torch, v) if isinstance(v, str) and v.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise Malformed(f"{v!r} is not a torch dtype")
    return dtype


def _unpickled(buf: memoryview, key: str) -> object:
    try:
        return pickle.loads(buf)
    except Exception as e:  # whatever the pickled class's code raises
        raise StoreError(
            f"Unpickling blobs/{key} failed: {e!r}. Define or import the class it "
            f"names (as in the notebook that saved it), then load again."
        ) from e


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
