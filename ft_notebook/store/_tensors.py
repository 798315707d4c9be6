"""Tensors and arrays to and from safetensors files, without a copy on either side.

The safetensors format (https://github.com/huggingface/safetensors) is an 8-byte
little-endian header length, a JSON header naming each tensor's dtype, shape and byte
range, then the tensors' bytes back to back. It is written here rather than through
``safetensors.torch.save`` so that the bytes go from tensor memory straight to the file
and the hash, with no intermediate copy of the whole state; the files are standard
(the tests read them back with the safetensors library). Tensors are laid out largest
item size first and the header is padded to 8 bytes, so every tensor starts aligned
for its dtype, as the library does it too.

Reading parses the header with bounds checks (a file is read only after its hash
matched its manifest, but a parser must not trust its input anyway) and makes tensors
and arrays that share the file's buffer, so a load costs one read and one hash.

This module imports torch only when it meets a tensor: a NumPy-only state (a notebook
snapshot) never pays for it.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ft_notebook.exceptions import StoreError
from ft_notebook.store._staging import StagingPool, copy_side_by_side

if TYPE_CHECKING:
    import torch


# safetensors dtype code -> (torch attribute name, item size, numpy dtype or None)
_DTYPES: dict[str, tuple[str, int, str | None]] = {
    "BOOL": ("bool", 1, "|b1"),
    "U8": ("uint8", 1, "|u1"),
    "I8": ("int8", 1, "|i1"),
    "I16": ("int16", 2, "<i2"),
    "U16": ("uint16", 2, "<u2"),
    "F16": ("float16", 2, "<f2"),
    "BF16": ("bfloat16", 2, None),
    "I32": ("int32", 4, "<i4"),
    "U32": ("uint32", 4, "<u4"),
    "F32": ("float32", 4, "<f4"),
    "I64": ("int64", 8, "<i8"),
    "U64": ("uint64", 8, "<u8"),
    "F64": ("float64", 8, "<f8"),
    "C64": ("complex64", 8, "<c8"),
    "F8_E4M3": ("float8_e4m3fn", 1, None),
    "F8_E5M2": ("float8_e5m2", 1, None),
    "F8_E4M3FNUZ": ("float8_e4m3fnuz", 1, None),
    "F8_E5M2FNUZ": ("float8_e5m2fnuz", 1, None),
}
_NUMPY_CODES = {np.dtype(n).newbyteorder("<"): c for c, (_, _, n) in _DTYPES.items() if n}
_MAX_HEADER = 100 << 20  # the library's own limit

if sys.byteorder != "little":  # pragma: no cover - no big-endian machine runs torch today
    raise ImportError(
        "ft_notebook.store writes little-endian safetensors and needs a little-endian machine"
    )


@dataclass(frozen=True)
class Raw:
    """One tensor or array as safetensors will hold it."""

    code: str
    shape: tuple[int, ...]
    #: The values' bytes, little-endian (a view that keeps its tensor or array alive).
    data: memoryview

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


class Stage:
    """Where copies of one asynchronous save go: buffers from a pool, kept to give back."""

    def __init__(self, pool: StagingPool) -> None:
        self._pool = pool
        self.buffers: list[tuple[torch.Tensor, bool]] = []
        #: Called before the copies are read (GPU copies in flight).
        self.waits: list[Callable[[], None]] = []
        self._copies: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []

    def take(self, nbytes: int, *, pinned: bool) -> torch.Tensor:
        buf = self._pool.take(nbytes, pinned=pinned)
        self.buffers.append((buf, pinned))
        return buf

    def copy_later(self, dst: np.ndarray[Any, Any], src: np.ndarray[Any, Any]) -> None:
        """Note a byte copy for :meth:`copy_all`, which does them side by side."""
        self._copies.append((dst, src))

    def copy_all(self) -> None:
        """Do the noted copies; the caller may change its tensors once this returns."""
        copies, self._copies = self._copies, []
        copy_side_by_side(copies)

    def release(self) -> None:
        """Give the buffers back; the save's bytes must not be read after this."""
        self._pool.give_back(self.buffers)
        self.buffers = []


@dataclass(frozen=True)
class Entry:
    """Where one tensor lies in a file that was read into memory."""

    code: str
    shape: tuple[int, ...]
    start: int
    end: int


def torch_raw(t: torch.Tensor, *, path: str, stage: Stage | None = None) -> Raw:
    """``t`` as a :class:`Raw`: a view of its bytes, or with ``stage`` a copy in a
    buffer of it (see :mod:`._staging`), which no longer aliases ``t``.

    A copy from a GPU goes there without blocking, and ``stage.waits`` gets what to
    call before the bytes are read. Later work on the same stream is ordered after the
    copy, so the caller may go on using ``t`` at once.
    """
    import torch

    code = _torch_code(t)
    if t.layout != torch.strided or t.is_quantized or t.is_meta or t.is_nested or code is None:
        raise StoreError(
            f"Cannot save {path}: a torch tensor with dtype {t.dtype}, layout {t.layout} "
            f"on {t.device} has no safetensors encoding. Convert it first (e.g. "
            f".to_dense(), .dequantize(), or .to(torch.float32) for {t.dtype})."
        )
    t = t.detach()
    if stage is not None and t.numel():
        gpu = t.device.type == "cuda"
        buf = stage.take(t.numel() * t.element_size(), pinned=gpu)
        flat = t.reshape(-1) if t.is_contiguous() else None
        if (
            not gpu
            and flat is not None
            and flat.stride(0) == 1
            and not t.is_conj()
            and not t.is_neg()
        ):
            stage.copy_later(buf.numpy(), flat.view(torch.uint8).numpy())  # a plain memcpy
            return Raw(code, tuple(t.shape), buf.numpy().data)
        buf.view(t.dtype).view(t.shape).copy_(t, non_blocking=gpu)  # resolves conj/neg too
        if gpu:
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(torch.cuda.current_stream(t.device))
            stage.waits.append(event.synchronize)
        return Raw(code, tuple(t.shape), buf.numpy().data)
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    t = (
        t.contiguous()
        if t.device.type == "cpu"
        else t.to("cpu", memory_format=torch.contiguous_format)
    )
    flat = t.reshape(-1)
    if flat.numel() and flat.stride(0) != 1:  # a one-element view (x.imag) keeps its stride
        flat = flat.clone(memory_format=torch.contiguous_format)
    return Raw(code, tuple(t.shape), flat.view(torch.uint8).numpy().data)


def numpy_raw(a: np.ndarray[Any, Any], *, path: str, stage: Stage | None = None) -> Raw:
    """``a`` as a :class:`Raw`: a view of its bytes, or with ``stage`` a copy."""
    little = a.dtype.newbyteorder("<")
    code = _NUMPY_CODES.get(little)
    if code is None:
        raise StoreError(
            f"Cannot save {path}: a NumPy array of dtype {a.dtype} has no safetensors "
            f"encoding (it takes bool, integers, float16/32/64 and complex64). Convert "
            f"it with .astype(...), or pass allow_pickle=True for a notebook snapshot."
        )
    shape = tuple(int(n) for n in a.shape)
    if stage is not None and a.size:
        buf = stage.take(a.size * a.itemsize, pinned=False).numpy()
        if a.dtype == little and a.flags.c_contiguous:
            stage.copy_later(buf, a.reshape(-1).view(np.uint8))
        else:
            np.copyto(buf.view(little).reshape(shape), a)  # converts big-endian on the way
        return Raw(code, shape, buf.data)
    a = a.astype(little) if a.dtype != little else np.ascontiguousarray(a)
    return Raw(code, shape, a.reshape(-1).view(np.uint8).data)


def staging_sizes(state: Any) -> list[tuple[int, bool]]:
    """The (nbytes, pinned) of each buffer ``save_async(state)`` will take: one per
    non-empty tensor (pinned if it is on a GPU) and NumPy array, as
    :func:`torch_raw` and :func:`numpy_raw` take them."""
    torch = sys.modules.get("torch")
    sizes: list[tuple[int, bool]] = []

    def walk(obj: Any) -> None:
        if isinstance(obj, Mapping):
            for v in obj.values():
                walk(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v)
        elif torch is not None and isinstance(obj, torch.Tensor):
            if obj.numel():
                sizes.append((obj.numel() * obj.element_size(), obj.device.type == "cuda"))
        elif type(obj) is np.ndarray and obj.size:
            sizes.append((obj.size * obj.itemsize, False))

    walk(state)
    return sizes


def numpy_supported(a: np.ndarray[Any, Any]) -> bool:
    return a.dtype.newbyteorder("<") in _NUMPY_CODES


def header(raws: Sequence[Raw]) -> tuple[bytes, list[int]]:
    """The header bytes of a file holding ``raws`` named "0", "1", ..., and the order
    in which their bytes follow it."""
    order = sorted(range(len(raws)), key=lambda i: (-_DTYPES[raws[i].code][1], i))
    meta: dict[str, Any] = {}
    offset = 0
    for i in order:
        r = raws[i]
        meta[str(i)] = {
            "dtype": r.code,
            "shape": list(r.shape),
            "data_offsets": [offset, offset + r.nbytes],
        }
        offset += r.nbytes
    text = json.dumps(meta, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)  # the format allows trailing spaces
    return struct.pack("<Q", len(text)) + text, order


def parse(buf: memoryview) -> dict[str, Entry]:
    """The tensors of a safetensors file read into ``buf``; raises ValueError if malformed."""
    if len(buf) < 8:
        raise ValueError(f"{len(buf)} bytes is too short for a safetensors file")
    (size,) = struct.unpack_from("<Q", buf, 0)
    if size > min(len(buf) - 8, _MAX_HEADER):
        raise ValueError(f"header length {size} runs past the end of the {len(buf)}-byte file")
    meta = json.loads(bytes(buf[8 : 8 + size]))
    if not isinstance(meta, dict):
        raise ValueError("the header is not a JSON object")
    base = 8 + size
    entries: dict[str, Entry] = {}
    for name, info in meta.items():
        if name == "__metadata__":
            continue
        code, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if code not in _DTYPES or not all(type(n) is int and n >= 0 for n in [*shape, begin, end]):
            raise ValueError(f"tensor {name!r} has a bad dtype, shape or offsets: {info!r}")
        if end - begin != math.prod(shape) * _DTYPES[code][1] or begin > end:
            raise ValueError(f"tensor {name!r}: offsets {begin}..{end} do not fit shape {shape}")
        entries[name] = Entry(code, tuple(shape), base + begin, base + end)
    position = base  # the data must be covered exactly, without holes or overlaps
    for e in sorted(entries.values(), key=lambda e: (e.start, e.end)):
        if e.start != position:
            raise ValueError(f"the data has a hole or overlap at byte {e.start}")
        position = e.end
    if position != len(buf):
        raise ValueError(f"the data ends at byte {position}, the file at {len(buf)}")
    return entries


def to_torch(buf: memoryview, e: Entry) -> torch.Tensor:
    """The tensor ``e`` of ``buf``, sharing its memory."""
    import torch

    dtype = getattr(torch, _DTYPES[e.code][0])
    if e.end == e.start:
        return torch.empty(e.shape, dtype=dtype)
    count = (e.end - e.start) // _DTYPES[e.code][1]
    return torch.frombuffer(buf, dtype=dtype, count=count, offset=e.start).reshape(e.shape)


def to_numpy(buf: memoryview, e: Entry) -> np.ndarray[Any, Any]:
    """The array ``e`` of ``buf``, sharing its memory."""
    name = _DTYPES[e.code][2]
    if name is None:
        raise ValueError(f"dtype {e.code} has no NumPy equivalent")
    dtype = np.dtype(name)
    count = (e.end - e.start) // dtype.itemsize
    return np.frombuffer(buf, dtype=dtype, count=count, offset=e.start).reshape(e.shape)


def _torch_code(t: torch.Tensor) -> str | None:
    name = str(t.dtype).removeprefix("torch.")
    for code, (attr, _, _) in _DTYPES.items():
        if attr == name:
            return code
    return None
