"""What a snapshot keeps of a variable's bulk data, and loading a variable back.

Variables are pickled by :mod:`._pickler`, which takes arrays, tensors and other
variables out of the pickle as references. This module holds what both sides share
(the :class:`BufferRecord` of each array or tensor taken out, its chunks) and the
read side: :class:`SnapshotUnpickler` resolves the references, :func:`rebuild_buffer`
turns chunks back into an array or tensor. The read side needs no cloudpickle and
imports numpy (and torch) only when a snapshot holds their objects, so that a
restore in a fresh kernel pays only for what it brings back.
"""

from __future__ import annotations
import __future__

import functools
import io
import pickle
import threading
from collections.abc import Callable, Mapping
from types import CodeType
from typing import Any, NamedTuple

import xxhash

from ft_notebook.session import _views

CHUNK = 4 << 20

#: The unpickler whose ``load`` runs in a notebook's frames, and what it returned
#: (see :meth:`SnapshotUnpickler.load_as_notebook`); a thread's own.
_LOADING = threading.local()
_THIS = __name__
_FRAMES_NAME = "<ft_notebook restore>"
#: Notebook frames above ``load()``: statsmodels looks 2, 3, 1, 0 and 4 frames up.
_FRAMES = 5
# no name of the notebook's is bound in them, and no frame of ours is between them
_LOAD_HERE = (
    f"__import__({_THIS!r}, fromlist=['_'])._LOADING.result = "
    f"__import__({_THIS!r}, fromlist=['_'])._LOADING.unpickler.load()"
)
#: Names the frames look up in the notebook's namespace: a variable named so
#: (``exec = ...``) would be called instead, and the load goes without the frames.
_SHADOWED = frozenset({"exec", "__import__"})
_ONE_DEEPER = "exec(__import__({this!r}, fromlist=['_'])._LOADING.frames[{i}])"
_FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


class BufferRecord(NamedTuple):
    """Bulk data kept outside the pickle; ``digest`` names its bytes in the blob area.

    The session's records are NamedTuples, not frozen dataclasses: a restore in a
    fresh kernel creates their classes, at 0.5 ms each for a frozen dataclass against
    0.1 ms (a restore must beat re-running a small notebook)."""

    key: str  # identity of the object at snapshot time: same key, same restored object
    digest: str  # of the whole content (the chunk digests)
    nbytes: int
    kind: str  # "numpy" | "torch" | "bytes" | "oob" (a pickle protocol 5 buffer)
    dtype: str
    shape: tuple[int, ...]
    extra: Mapping[str, Any]  # requires_grad, device, parameter; readonly (oob)
    #: xxh3-128 of each CHUNK of the bytes, "" for a chunk of zeros (not stored)
    chunks: tuple[str, ...]

    def chunk_sizes(self) -> list[tuple[int, str]]:
        """(offset, digest) of each stored chunk."""
        return [(i * CHUNK, d) for i, d in enumerate(self.chunks) if d]


def chunk_size(record: BufferRecord, offset: int) -> int:
    return min(CHUNK, record.nbytes - offset)


def digest_of(data: memoryview | bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


class SnapshotUnpickler(pickle.Unpickler):
    """Loads a variable whose references are resolved by ``resolve_var`` and ``load_buffer``."""

    def __init__(
        self,
        data: bytes | memoryview,
        resolve_var: Callable[[str], Any],
        load_buffer: Callable[[str], Any],
        out_of_band: list[Any] | None = None,
        *,
        namespace: dict[str, Any] | None = None,
        tensors: dict[str, Any] | None = None,
    ) -> None:
        # out_of_band: the protocol 5 buffers the pickler took out, in their order
        super().__init__(io.BytesIO(data), buffers=out_of_band or ())
        self._resolve_var = resolve_var
        self._load_buffer = load_buffer
        # what the notebook's functions are bound to: the namespace being restored
        self._namespace = {} if namespace is None else namespace
        # key -> tensor: one tensor seen from several variables comes back as one
        self._tensors = {} if tensors is None else tensors

    def load_as_notebook(self) -> Any:
        """``load()``, called from a module-level frame of the namespace being
        restored (a few deep), compiled as the notebook's cells are: the frames a
        cell that unpickled it would give. A library that rebuilds on unpickling what it took
        from its caller's frame finds the notebook's names and compiler flags, not
        ours (statsmodels re-evaluates a formula model's design in the frames above its
        ``__setstate__``, and patsy keeps their names and flags: from our frames a
        ``np.log(x)`` term found no ``np``, and a plain one came back with our
        ``from __future__ import annotations`` flag). A namespace that is not a
        module's (no ``__builtins__``), or that binds a name the frames call, is
        loaded as ``load()`` does."""
        if "__builtins__" not in self._namespace or _SHADOWED & self._namespace.keys():
            return self.load()
        frames = _frames(_cell_flags())
        _LOADING.unpickler, _LOADING.frames = self, frames
        try:
            exec(frames[-1], self._namespace)
            return _LOADING.result
        finally:
            _LOADING.unpickler = _LOADING.result = None

    def persistent_load(self, pid: Any) -> Any:
        tag = pid[0]
        if tag == "var":
            return self._resolve_var(pid[1])
        if tag == "buf":
            return self._load_buffer(pid[1])
        if tag == "ns":
            return self._namespace
        if tag == "view":
            _, owner, offset, shape, strides, dtype = pid
            return _views.numpy_view(self._resolve_var(owner), offset, shape, strides, dtype)
        if tag == "aview":
            _, key, offset, shape, strides, dtype = pid
            return _views.numpy_view(self._load_buffer(key), offset, shape, strides, dtype)
        if tag == "tview":
            _, key, storage, dtype, shape, stride, offset, extra = pid
            found = self._tensors.get(key)
            if found is None:
                base = self._load_buffer(storage)
                found = _views.tensor_view(base, dtype, shape, stride, offset, extra)
                self._tensors[key] = found
            return found
        raise pickle.UnpicklingError(f"unknown reference {tag!r} in a snapshot")


@functools.cache
def _frames(flags: int) -> tuple[CodeType, ...]:
    """The code of each frame, innermost first: each one but the first runs the one
    before it in its own namespace, the first calls ``load()``."""
    frames = [compile(_LOAD_HERE, _FRAMES_NAME, "exec", flags, True)]
    for i in range(_FRAMES - 1):
        deeper = _ONE_DEEPER.format(this=_THIS, i=i)
        frames.append(compile(deeper, _FRAMES_NAME, "exec", flags, True))
    return tuple(frames)


def _cell_flags() -> int:
    """The ``__future__`` flags the notebook's cells are compiled with (none outside
    IPython)."""
    import sys

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    compiler = getattr(shell, "compile", None)
    return int(getattr(compiler, "flags", 0)) & _FUTURE_FLAGS


def rebuild_buffer(record: BufferRecord, read_into: Callable[[str, memoryview], None]) -> Any:
    """Turn stored chunks back into the array or tensor they came from.

    Zero chunks cost nothing: the buffer starts as lazily allocated zeros. The others
    are read straight into their place (``read_into(digest, out)`` verifies them
    there), so a large array's bytes are not copied a second time.
    """
    import numpy as np

    flat = np.zeros(record.nbytes, dtype=np.uint8)
    for offset, digest in record.chunk_sizes():
        read_into(digest, flat[offset : offset + chunk_size(record, offset)].data)
    if record.kind == "bytes":
        return flat.tobytes()
    if record.kind == "oob":  # as writable as it was: numpy and pyarrow keep the flag
        data = flat.data
        return data.toreadonly() if record.extra.get("readonly") else data
    if record.kind == "numpy":
        if record.extra.get("order") == "F":  # its bytes as they lay: the transpose's
            return flat.view(np.dtype(record.dtype)).reshape(record.shape[::-1]).T
        return flat.view(np.dtype(record.dtype)).reshape(record.shape)
    import torch

    tensor = torch.from_numpy(flat).view(getattr(torch, record.dtype)).reshape(record.shape)
    device = record.extra.get("device", "cpu")
    if device != "cpu" and (not device.startswith("cuda") or torch.cuda.is_available()):
        tensor = tensor.to(device)
    if record.extra.get("parameter"):
        return torch.nn.Parameter(tensor, requires_grad=bool(record.extra.get("requires_grad")))
    return tensor.requires_grad_(bool(record.extra.get("requires_grad")))
