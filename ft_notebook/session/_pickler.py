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
  buffer records too, in the order the unpickler wants them back;
- an object a library's module holds at module level (``scipy.stats.t``): that
  module's attribute, with its state (see ``_singletons``).

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
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
import xxhash

from ft_notebook.session import _rebind, _reducers, _singletons, _views
from ft_notebook.session._namespace import describe
from ft_notebook.session._objects import CHUNK, BufferRecord, digest_of
from ft_notebook.store._io import run_all

# Arrays smaller than this stay inside the pickle: a record costs more than it saves.
INLINE_BYTES = 4096


class _Namespace:
    """Stands for the notebook's namespace in a pickle (a persistent reference)."""


_NAMESPACE = _Namespace()


@functools.lru_cache(maxsize=4)
def _zeros_digest(n: int) -> str:
    return digest_of(bytes(n))


def _array_bytes(arr: np.ndarray[Any, Any], *, as_laid: bool = True) -> memoryview:
    # through uint8: a datetime64 array has no buffer format of its own. A Fortran-
    # ordered one as it lies in memory (its transpose is C-ordered, no copy): numpy's
    # pickle keeps the order too, and BLAS adds in another order on another layout.
    # A content hash (not as_laid) reads the elements in C order, whatever the layout
    if as_laid and _fortran(arr):
        arr = arr.T
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data


def _array_extra(arr: np.ndarray[Any, Any], *, as_laid: bool = True) -> dict[str, Any]:
    return {"order": "F"} if as_laid and _fortran(arr) else {}


def _fortran(arr: np.ndarray[Any, Any]) -> bool:
    return bool(arr.flags.f_contiguous and not arr.flags.c_contiguous)


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


def _strided(t: Any, torch: Any) -> bool:
    return bool(t.layout == torch.strided and t.nbytes > 0)


# Classes found importable by name (a library's): cloudpickle's lookup of each, in
# every pickle of every snapshot, was a tenth of the pause on many small objects.
_BY_REFERENCE: set[type] = set()

_SCALARS = frozenset({int, float, str, bool, type(None), complex})
_CONTAINERS = frozenset({list, dict, tuple, set, frozenset})


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
        namespace_id: int | None = None,
        roots: Mapping[int, tuple[str, ...]] | None = None,
    ) -> None:
        super().__init__(file, protocol=5, buffer_callback=self._out_of_band)
        self._name = name
        self._named = named  # id(object) -> variable name, for the other variables
        # id of the notebook's namespace: its functions are bound to it, not copied
        self._namespace_id = namespace_id
        # id of an array's memory owner -> the variables viewing it (see _views)
        self._roots = roots or {}
        self._buffer_data = buffer_data  # digest -> bytes, shared across the snapshot
        self._content_only = content_only
        self._torch = sys.modules.get("torch")  # tensors exist only once it is loaded
        self.buffers: dict[str, BufferRecord] = {}
        self.out_of_band: list[str] = []  # keys of the protocol 5 buffers, in order
        self.refs: set[str] = set()
        # what the keys were made from: an id must not be reused while the snapshot runs
        self.keep_alive: list[Any] = []

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is type and obj in _BY_REFERENCE:
            return NotImplemented  # a library's class: pickle names it (cached lookup)
        reduced = _reducers.reduce(obj)
        if reduced is not None:
            return reduced
        if type(obj) is type and cloudpickle.cloudpickle._should_pickle_by_reference(obj):
            _BY_REFERENCE.add(obj)
            return NotImplemented
        library_global = _singletons.reduce(obj)
        if library_global is not None:
            return library_global
        if (
            type(obj) is types.FunctionType
            and self._namespace_id is not None
            and id(obj.__globals__) == self._namespace_id
        ):
            return self._bound_function(obj)
        return super().reducer_override(obj)

    def _bound_function(self, func: types.FunctionType) -> Any:
        """cloudpickle's reduction of ``func`` with "the namespace" in place of its
        copy of the globals (see ``_rebind``)."""
        code, _, _, _, closure = self._function_getnewargs(func)
        attributes, slots = cloudpickle.cloudpickle._function_getstate(func)
        slots["__globals__"] = {}
        args = (code, _NAMESPACE, func.__name__, None, closure)
        return (
            _rebind.make_function,
            args,
            (attributes, slots),
            None,
            None,
            _rebind.set_function_state,
        )

    def persistent_id(self, obj: Any) -> Any:
        # called for every object pickled: most are scalars and builtin containers,
        # answered first (9 in 10 calls on a namespace of small objects)
        kind = type(obj)
        if kind in _SCALARS:
            return None
        if obj is _NAMESPACE:
            return ("ns",)
        if kind is bytes:
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
        if kind in _CONTAINERS:
            return None
        if isinstance(obj, np.ndarray) and _plain_dtype(obj.dtype):
            view = None if self._content_only else self._view_of_named(obj)
            if view is None and not self._content_only:
                view = self._view_of_owner(obj)
            if view is not None:
                return view
            if obj.nbytes > INLINE_BYTES:
                laid = not self._content_only
                data, extra = _array_bytes(obj, as_laid=laid), _array_extra(obj, as_laid=laid)
                return ("buf", self._record(obj, "numpy", data, obj.dtype.str, extra))
        torch = self._torch
        if torch is not None and isinstance(obj, torch.Tensor) and _strided(obj, torch):
            extra = {
                "requires_grad": bool(obj.requires_grad),
                "device": str(obj.device),
                "parameter": type(obj).__name__ == "Parameter",
            }
            dtype = str(obj.dtype).removeprefix("torch.")
            if not self._content_only:
                return self._tensor_view(obj, dtype, extra)
            return ("buf", self._record(obj, "torch", _tensor_bytes(obj), dtype, extra))
        return None

    def _view_of_owner(self, arr: np.ndarray[Any, Any]) -> tuple[Any, ...] | None:
        """A view whose memory owner is no variable (``A = np.arange(n).reshape(..)``;
        ``A[:10]``), where several variables view it: the owner is kept as a buffer
        record, shared by them, and the view as its offset, shape and strides in it."""
        if not self._roots:
            return None
        owner = _views.memory_owner(arr)
        if owner is None or owner is arr or id(owner) not in self._roots:
            return None
        data, extra = _array_bytes(owner), _array_extra(owner)
        key = self._record(owner, "numpy", data, owner.dtype.str, extra)
        self.keep_alive.append(arr)
        self.refs.update(n for n in self._roots.get(id(owner), ()) if n != self._name)
        return ("aview", key, *_views.placement(arr, owner))

    def _tensor_view(self, t: Any, dtype: str, extra: dict[str, Any]) -> tuple[Any, ...]:
        """A tensor as its place in its storage: tensors viewing one storage (a
        slice, a transpose, weights tied between modules) come back on one storage."""
        storage, flat = _views.storage_bytes(t)
        storage_extra = {"device": str(t.device)}
        key = self._record(t, "torch", flat, "uint8", storage_extra, identity=storage.data_ptr())
        self.keep_alive.append(t)
        placement = (tuple(t.shape), tuple(t.stride()), int(t.storage_offset()))
        return ("tview", f"t{id(t):x}", key, dtype, *placement, extra)

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
        self,
        obj: Any,
        kind: str,
        data: memoryview,
        dtype: str,
        extra: dict[str, Any],
        *,
        identity: int | None = None,
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
            key = f"{id(obj) if identity is None else identity:x}:{digest}"
        if identity is not None or kind not in ("numpy", "torch"):
            shape: tuple[int, ...] = (data.nbytes,)
        else:
            shape = tuple(obj.shape)
        self.buffers[key] = BufferRecord(
            key, digest, data.nbytes, kind, dtype, shape, extra, tuple(chunks)
        )
        return key

    def _view_of_named(self, arr: np.ndarray[Any, Any]) -> tuple[Any, ...] | None:
        base = arr.base
        while isinstance(base, np.ndarray):
            owner = self._named.get(id(base))
            if owner is not None and owner != self._name and _views.contiguous(base):
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
    name: str,
    value: Any,
    named: Mapping[int, str],
    buffer_data: dict[str, memoryview],
    *,
    namespace_id: int | None = None,
    roots: Mapping[int, tuple[str, ...]] | None = None,
) -> Pickled:
    """Pickle ``value``; raises whatever pickling raises for an unpicklable object.
    Functions whose globals are the dict of id ``namespace_id`` are bound to it."""
    out = io.BytesIO()
    pickler = SnapshotPickler(out, name, named, buffer_data, namespace_id=namespace_id, roots=roots)
    pickler.dump(value)
    return Pickled(
        out.getvalue(), pickler.buffers, pickler.refs, pickler.out_of_band, pickler.keep_alive
    )


def content_fingerprint(value: Any, namespace_id: int | None = None) -> str:
    """A hash of what ``value`` holds, equal in another process for an equal value;
    raises what pickling raises for a value that cannot be fingerprinted. Functions
    of the namespace of id ``namespace_id`` count by their code, not its values."""
    out = io.BytesIO()
    pickler = SnapshotPickler(out, "", {}, {}, content_only=True, namespace_id=namespace_id)
    pickler.dump(value)
    h = xxhash.xxh3_128(out.getvalue())
    for record in pickler.buffers.values():  # in the order they were met
        h.update(f"{record.kind}:{record.dtype}:{record.shape}:{record.digest};".encode())
    return h.hexdigest()
