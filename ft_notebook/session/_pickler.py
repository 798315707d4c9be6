"""Pickling a notebook namespace so that buffers, identity and views survive.

A variable is pickled with cloudpickle (notebook-defined classes and lambdas go by
value), but three kinds of objects are taken out of the pickle by ``persistent_id``:

- another top-level variable: a reference by name, so two names for one object, and
  a list holding a model, come back as one object across separately stored variables;
- a numpy array or torch tensor whose memory is a view into a named array: a
  reference to that name with offset, shape and strides, so it comes back as a view;
- any other array or tensor: a *buffer* record. Its bytes are cut into chunks of
  ``CHUNK`` bytes, each stored once under its xxh3 content hash, so an in-place
  change to one element of a big array costs one chunk, not the array; all-zero
  chunks (preallocated, zero-initialised buffers) are not stored at all. The same
  object seen from several variables keeps one identity key, so an optimizer and
  its model share parameters again after a restore.

Pickle bytes then hold no bulk data, so hashing them is a cheap change fingerprint.
"""

from __future__ import annotations

import functools
import io
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
import xxhash

from ft_notebook.session._objects import CHUNK, BufferRecord, digest_of

# Arrays smaller than this stay inside the pickle: a record costs more than it saves.
INLINE_BYTES = 4096


@functools.lru_cache(maxsize=4)
def _zeros_digest(n: int) -> str:
    return digest_of(bytes(n))


def _array_bytes(arr: np.ndarray[Any, Any]) -> memoryview:
    return np.ascontiguousarray(arr).data.cast("B")


def _tensor_bytes(t: Any) -> memoryview:
    flat = t.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(_uint8()).numpy()).cast("B")


def _uint8() -> Any:
    import torch

    return torch.uint8


def _is_tensor(obj: Any) -> bool:
    torch = _torch_if_loaded()
    return torch is not None and isinstance(obj, torch.Tensor)


def _torch_if_loaded() -> Any:
    import sys

    return sys.modules.get("torch")


class SnapshotPickler(cloudpickle.Pickler):  # type: ignore[misc]
    """Pickles one variable; records what it took out in ``buffers`` and ``refs``."""

    def __init__(
        self,
        file: io.BytesIO,
        name: str,
        named: Mapping[int, str],
        buffer_data: dict[str, memoryview],
    ) -> None:
        super().__init__(file, protocol=5)
        self._name = name
        self._named = named  # id(object) -> variable name, for the other variables
        self._buffer_data = buffer_data  # digest -> bytes, shared across the snapshot
        self.buffers: dict[str, BufferRecord] = {}
        self.refs: set[str] = set()

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, io.IOBase) and not isinstance(obj, (io.BytesIO, io.StringIO)):
            # cloudpickle would turn a file into a StringIO of its content: not the same
            # object. Files are replayed instead, which reopens them where they were.
            raise pickle.PicklingError(
                f"an open file ({getattr(obj, 'name', '?')}) is replayed, not pickled"
            )
        other = self._named.get(id(obj))
        if other is not None and other != self._name:
            self.refs.add(other)
            # the id makes the pickle change when the name is bound to another object
            return ("var", other, id(obj))
        if isinstance(obj, np.ndarray) and obj.dtype != object:
            view = self._view_of_named(obj)
            if view is not None:
                return view
            if obj.nbytes > INLINE_BYTES:
                return ("buf", self._record(obj, "numpy", _array_bytes(obj), obj.dtype.str, {}))
        if _is_tensor(obj) and obj.layout == _torch_if_loaded().strided and obj.nbytes > 0:
            extra = {
                "requires_grad": bool(obj.requires_grad),
                "device": str(obj.device),
                "parameter": type(obj).__name__ == "Parameter",
            }
            dtype = str(obj.dtype).removeprefix("torch.")
            return ("buf", self._record(obj, "torch", _tensor_bytes(obj), dtype, extra))
        return None

    def _record(
        self, obj: Any, kind: str, data: memoryview, dtype: str, extra: dict[str, Any]
    ) -> str:
        chunks = []
        for start in range(0, data.nbytes, CHUNK):
            piece = data[start : start + CHUNK]
            d = digest_of(piece)
            if d == _zeros_digest(piece.nbytes):
                chunks.append("")
            else:
                chunks.append(d)
                self._buffer_data.setdefault(d, piece)
        digest = xxhash.xxh3_128_hexdigest(f"{data.nbytes}:{','.join(chunks)}".encode())
        key = f"{id(obj):x}:{digest}"
        self.buffers[key] = BufferRecord(
            key, digest, data.nbytes, kind, dtype, tuple(obj.shape), extra, tuple(chunks)
        )
        return key

    def _view_of_named(self, arr: np.ndarray[Any, Any]) -> tuple[Any, ...] | None:
        base = arr.base
        while isinstance(base, np.ndarray):
            owner = self._named.get(id(base))
            if owner is not None and owner != self._name and base.flags.c_contiguous:
                offset = arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]
                self.refs.add(owner)
                return ("view", owner, offset, arr.shape, arr.strides, arr.dtype.str)
            base = base.base
        return None


@dataclass
class Pickled:
    """One variable, pickled: its bytes, what they refer to, and their fingerprint."""

    data: bytes
    buffers: dict[str, BufferRecord]
    refs: set[str]

    @property
    def fingerprint(self) -> str:
        """Covers the pickle and the content of every buffer it took out."""
        h = xxhash.xxh3_128(self.data)
        for key in sorted(self.buffers):
            h.update(key.encode())
        return h.hexdigest()


def pickle_variable(
    name: str, value: Any, named: Mapping[int, str], buffer_data: dict[str, memoryview]
) -> Pickled:
    """Pickle ``value``; raises whatever pickling raises for an unpicklable object."""
    out = io.BytesIO()
    pickler = SnapshotPickler(out, name, named, buffer_data)
    pickler.dump(value)
    return Pickled(out.getvalue(), pickler.buffers, pickler.refs)
