"""Pickling a notebook namespace so that buffers, identity and views survive.

A variable is pickled with cloudpickle (notebook-defined classes and lambdas go by
value), protocol 5, and its bulk data is taken out of the pickle:

- another top-level variable: a reference by name, so two names for one object, and
  a list holding a model, come back as one object across separately stored variables;
- a numpy array or torch tensor whose memory is a view into a named array: a
  reference to that name with offset, shape and strides, so it comes back as a view;
- any other array or tensor of a plain dtype: a *buffer* record, keyed by the
  object's identity so that the same object seen from several variables (an
  optimizer and its model's parameters) comes back as one object;
- every buffer a library hands pickle out of band (protocol 5 ``PickleBuffer``: the
  blocks of a pandas frame and its extension arrays, pyarrow buffers, scipy.sparse
  and scikit-learn arrays), and large ``bytes`` (a polars frame pickles as one):
  buffer records too, in the order the unpickler wants them back.

A buffer's bytes are cut into chunks of ``CHUNK`` bytes, each stored once under its
xxh3 content hash, so an in-place change to one element of a big array costs one
chunk, and a frame with one new column costs that column; all-zero chunks are not
stored at all. Locks, open files and SQLite connections are reduced by
:mod:`._reducers`. Pickle bytes then hold no bulk data, so hashing them with the
buffer digests is a cheap, exact change fingerprint.

:func:`content_fingerprint` hashes what an object holds, not which objects it is:
no references by name, no identities, generators by their observable state. It is
what a replayed value is checked against, in another process.
"""

from __future__ import annotations

import functools
import io
import pickle
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
import xxhash

from ft_notebook.session import _reducers
from ft_notebook.session._namespace import describe
from ft_notebook.session._objects import CHUNK, BufferRecord, digest_of
from ft_notebook.store._io import run_all

# Arrays smaller than this stay inside the pickle: a record costs more than it saves.
INLINE_BYTES = 4096


@functools.lru_cache(maxsize=4)
def _zeros_digest(n: int) -> str:
    return digest_of(bytes(n))


def _array_bytes(arr: np.ndarray[Any, Any]) -> memoryview:
    # through uint8: a datetime64 array has no buffer format of its own
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data


def _plain_dtype(dtype: np.dtype[Any]) -> bool:
    """A dtype its ``.str`` names exactly (not structured, no subarray, no metadata):
    kept as a buffer record; the others go through numpy's own pickling, out of band."""
    return not dtype.hasobject and dtype.fields is None and np.dtype(dtype.str) == dtype


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
    """Pickles one variable; records what it took out in ``buffers`` and ``refs``.

    With ``content_only``, nothing is taken out by name or identity and generators
    are described, not refused: the pickle is for hashing, never for loading.
    """

    def __init__(
        self,
        file: io.BytesIO,
        name: str,
        named: Mapping[int, str],
        buffer_data: dict[str, memoryview],
        *,
        content_only: bool = False,
    ) -> None:
        super().__init__(file, protocol=5, buffer_callback=self._out_of_band)
        self._name = name
        self._named = named  # id(object) -> variable name, for the other variables
        self._buffer_data = buffer_data  # digest -> bytes, shared across the snapshot
        self._content_only = content_only
        self.buffers: dict[str, BufferRecord] = {}
        self.out_of_band: list[str] = []  # keys of the protocol 5 buffers, in order
        self.refs: set[str] = set()
        # what the keys were made from: an id must not be reused while the snapshot runs
        self.keep_alive: list[Any] = []

    def reducer_override(self, obj: Any) -> Any:
        reduced = _reducers.reduce(obj)
        if reduced is not None:
            return reduced
        return super().reducer_override(obj)

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is bytes:
            if len(obj) > INLINE_BYTES:
                return ("buf", self._record(obj, "bytes", memoryview(obj), "B", {}))
            return None
        if self._content_only:
            if isinstance(obj, types.GeneratorType):
                return ("described", describe(obj))
        else:
            other = self._named.get(id(obj))
            if other is not None and other != self._name:
                self.refs.add(other)
                # the id makes the pickle change when the name is bound to another object
                return ("var", other, id(obj))
        if isinstance(obj, np.ndarray) and _plain_dtype(obj.dtype):
            view = None if self._content_only else self._view_of_named(obj)
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

    def _out_of_band(self, buffer: pickle.PickleBuffer) -> bool:
        """Take a protocol 5 buffer out of the pickle (False) unless it is small."""
        try:
            data = buffer.raw()
        except BufferError:  # not contiguous: pickle copies it in band
            return True
        if data.nbytes <= INLINE_BYTES:
            return True
        extra = {"readonly": data.readonly}
        self.out_of_band.append(self._record(buffer, "oob", data, "B", extra))
        return False

    def _record(
        self, obj: Any, kind: str, data: memoryview, dtype: str, extra: dict[str, Any]
    ) -> str:
        chunks = []
        pieces = [data[start : start + CHUNK] for start in range(0, data.nbytes, CHUNK)]
        # xxh3 releases the GIL: a buffer of several chunks is hashed on every core,
        # which is most of the pause a snapshot of a big frame costs
        digests = run_all(digest_of, pieces) if len(pieces) > 1 else [digest_of(p) for p in pieces]
        for piece, d in zip(pieces, digests, strict=True):
            if d == _zeros_digest(piece.nbytes):
                chunks.append("")
            else:
                chunks.append(d)
                self._buffer_data.setdefault(d, piece)
        digest = xxhash.xxh3_128_hexdigest(f"{data.nbytes}:{','.join(chunks)}".encode())
        if self._content_only or kind in ("oob", "bytes"):
            # by their order: identity means nothing to a content hash, a protocol 5
            # buffer is a wrapper made for this pickle, and bytes cannot be changed in
            # place (an id would make an unchanged frame look changed every time)
            key = f"{self._name}#{len(self.buffers)}:{digest}"
        else:
            self.keep_alive.append(obj)
            key = f"{id(obj):x}:{digest}"
        shape = (
            tuple(getattr(obj, "shape", (data.nbytes,)))
            if kind in ("numpy", "torch")
            else (data.nbytes,)
        )
        self.buffers[key] = BufferRecord(
            key, digest, data.nbytes, kind, dtype, shape, extra, tuple(chunks)
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
    out_of_band: list[str]
    keep_alive: list[Any]

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
    return Pickled(
        out.getvalue(), pickler.buffers, pickler.refs, pickler.out_of_band, pickler.keep_alive
    )


def content_fingerprint(value: Any) -> str:
    """A hash of what ``value`` holds, equal in another process for an equal value;
    raises what pickling raises for a value that cannot be fingerprinted."""
    out = io.BytesIO()
    pickler = SnapshotPickler(out, "", {}, {}, content_only=True)
    pickler.dump(value)
    h = xxhash.xxh3_128(out.getvalue())
    for record in pickler.buffers.values():  # in the order they were met
        h.update(f"{record.kind}:{record.dtype}:{record.shape}:{record.digest};".encode())
    return h.hexdigest()
