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

This module reads those files back; :mod:`._encode` writes them.
"""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from ft_notebook.exceptions import StoreError
from ft_notebook.store._values import TAG, Malformed, decode

if TYPE_CHECKING:
    # loaded where tensors are encoded or decoded: a notebook restore reads none
    from ft_notebook.store import _tensors

PACK_BELOW = 1 << 20
STATE_FORMAT = "ft-notebook-state/1"
# .bin: opaque bytes a caller hashed itself (notebook snapshots' buffers); never decoded
BLOB_KEY = re.compile(r"[0-9a-f]{32}\.(?:safetensors|json|pkl|bin)")

Buffer: TypeAlias = "bytes | memoryview"


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
                if not key.endswith(".pkl"):  # the checks of who wrote pickles go by name
                    raise Malformed(f"a pickled object in {key}, not in a .pkl file")
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
