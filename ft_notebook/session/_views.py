"""Arrays and tensors that share memory, kept sharing it.

A numpy view is kept as its owner's buffer plus its offset, shape and strides in
it, whatever made it: a slice, a reshape, a transpose, a strided or ``ravel`` view,
a view of a view. The owner is the array that owns the memory (``base is None``),
named by the notebook or not: ``A = np.arange(n).reshape(200, 1000)`` is itself a
view of an unnamed array, and ``A[:10]`` another one, so both are placed in that
one owner and come back sharing memory. A torch tensor is kept as its place in its
storage, so a slice, a transposed weight or a parameter tied between modules comes
back on one storage.

What is not kept as a view is copied, as pickle would: an array over memory that
no array owns (``np.frombuffer`` of bytes, a memory map) or with a dtype numpy
pickles itself (objects, structured), and tensors that are not strided. The write
side (``memory_owner``, ``placement``, ``storage_bytes``) runs while pickling; the
read side (``numpy_view``, ``tensor_view``) while loading.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any


def memory_owner(arr: Any) -> Any:
    """The array owning ``arr``'s memory when it can hold a view of it: C- or
    Fortran-contiguous (both come back as they lay), of a dtype its ``.str`` names;
    else None."""
    import numpy as np

    owner = arr
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    if owner.base is not None or not contiguous(owner):
        return None
    dtype = owner.dtype
    if dtype.hasobject or dtype.fields is not None or np.dtype(dtype.str) != dtype:
        return None
    return owner


def contiguous(arr: Any) -> bool:
    """Whether ``arr`` lies in one block, in C or Fortran order."""
    return bool(arr.flags.c_contiguous or arr.flags.f_contiguous)


def placement(arr: Any, owner: Any) -> tuple[int, tuple[int, ...], tuple[int, ...], str]:
    """Where ``arr`` lies in ``owner``'s memory: byte offset, shape, strides, dtype."""
    offset = arr.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
    return offset, tuple(arr.shape), tuple(arr.strides), arr.dtype.str


def numpy_view(
    owner: Any, offset: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: str
) -> Any:
    import numpy as np

    # a Fortran-ordered owner exports no plain buffer; its transpose, at the same
    # address, does
    memory = owner if owner.flags.c_contiguous else owner.T
    view = np.ndarray(shape, np.dtype(dtype), buffer=memory, offset=offset, strides=strides)
    if not owner.flags.writeable:
        view.flags.writeable = False
    return view


def storage_bytes(t: Any) -> tuple[Any, memoryview]:
    """A tensor's whole storage and its bytes (on the CPU)."""
    import torch

    storage = t.untyped_storage()
    flat: Any = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
    return storage, memoryview(flat.detach().cpu().numpy()).cast("B")


def tensor_view(
    storage: Any,
    dtype: str,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    offset: int,
    extra: dict[str, Any],
) -> Any:
    """The tensor at ``offset``/``stride`` in ``storage`` (a uint8 tensor of it)."""
    import torch

    tensor = storage.view(getattr(torch, dtype)).as_strided(shape, stride, offset)
    requires_grad = bool(extra.get("requires_grad"))
    if extra.get("parameter"):
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad) if requires_grad else tensor


def _final_base(arr: Any) -> Any:
    import numpy as np

    owner = arr
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    return owner


def array_roots(variables: Mapping[str, Any]) -> dict[int, tuple[str, ...]]:
    """id of a memory owner -> the numpy variables on its memory (views of it, or it),
    where two or more are: only those are placed in their owner; an array inside
    another object is pickled as pickle would (pandas tracks its own views)."""
    np = sys.modules.get("numpy")
    if np is None:
        return {}
    roots: dict[int, list[str]] = {}
    for name, value in variables.items():
        if isinstance(value, np.ndarray):
            roots.setdefault(id(_final_base(value)), []).append(name)
    return {k: tuple(v) for k, v in roots.items() if len(v) > 1}


def unkept_views(variables: Mapping[str, Any]) -> dict[str, str]:
    """Variables that share memory with others in a way a snapshot cannot keep (an
    array of objects, memory no array owns), by name, with what comes back instead."""
    np = sys.modules.get("numpy")
    if np is None:
        return {}
    arrays = {n: v for n, v in variables.items() if isinstance(v, np.ndarray)}
    named = {id(v): n for n, v in arrays.items()}
    unkept = {}
    for names in array_roots(arrays).values():
        for name in names:
            arr = arrays[name]
            if _kept(arr, named, name):
                continue
            others = ", ".join(n for n in names if n != name)
            plain = not (arr.dtype.hasobject or arr.dtype.fields)
            why = "its memory is not an array's own" if plain else "its dtype holds objects"
            unkept[name] = f"it shares memory with {others}, but {why}: it comes back as a copy"
    return unkept


def _kept(arr: Any, named: Mapping[int, str], name: str) -> bool:
    """Whether the pickler keeps ``arr``'s memory shared (a view of a named array,
    placed in its owner, or the owner itself), as ``SnapshotPickler`` decides."""
    import numpy as np

    dtype = arr.dtype
    if dtype.hasobject or dtype.fields is not None or np.dtype(dtype.str) != dtype:
        return False
    if memory_owner(arr) is not None:
        return True
    base = arr.base
    while isinstance(base, np.ndarray):
        if named.get(id(base), name) != name and contiguous(base):
            return True
        base = base.base
    return False
