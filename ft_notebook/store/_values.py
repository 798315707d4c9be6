"""Plain Python values as JSON that round-trips exactly and never executes code.

A checkpoint's structure and its non-tensor values (step counters, hyper-parameters,
Python and NumPy RNG states) are stored as JSON. Plain JSON loses what checkpoints
need: tuples, dicts with int keys (every optimizer ``state_dict``), NaN and infinity,
bytes, ``OrderedDict`` with its ``_metadata``. Those are written as small tagged
objects ``{"__ft__": tag, "v": ...}``, so decoding gives back values equal to, and of
the same type as, what was saved. Nothing in the encoding names a class to import or a
function to call: decoding a hostile file can raise, never run code.

Tensors and arrays are not values here: the encoder hands anything it does not know to
a callback (the codec), which stores it elsewhere and returns the tag to put in its
place, or refuses it.
"""

from __future__ import annotations

import base64
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from ft_notebook.exceptions import StoreError

TAG = "__ft__"

#: Encodes an object the value encoder does not know; returns its tag or None.
LeafEncoder = Callable[[object, str], "dict[str, Any] | None"]
#: Turns a tag the value decoder does not know back into an object.
LeafDecoder = Callable[["Mapping[str, Any]"], object]

_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_SUPPORTED = "None, bool, int, float, complex, str, bytes, list, tuple, set, dict"


class Malformed(ValueError):
    """A stored value does not follow the encoding (damaged, or not written by us)."""


def encode(value: object, path: str, leaf: LeafEncoder | None = None) -> Any:
    """``value`` as JSON-ready data; ``path`` (e.g. ``state``) names it in errors."""
    return _Encoder(leaf).encode(value, path)


def decode(data: Any, leaf: LeafDecoder | None = None) -> Any:
    """The value :func:`encode` was given; raises :class:`Malformed` on bad input."""
    if isinstance(data, list):
        return [decode(x, leaf) for x in data]
    if not isinstance(data, dict):
        if data is None or isinstance(data, (bool, int, float, str)):
            return data
        raise Malformed(f"unexpected JSON value of type {type(data).__name__}")
    tag = data.get(TAG)
    if tag is None:
        return {k: decode(v, leaf) for k, v in data.items()}
    if not isinstance(tag, str):
        raise Malformed(f"tag {tag!r} is not a string")
    decoder = _DECODERS.get(tag)
    if decoder is not None:
        try:
            return decoder(data, leaf)
        except (KeyError, TypeError, ValueError) as e:
            raise Malformed(f"a {tag!r} value does not decode: {e!r}") from e
    if leaf is None:
        raise Malformed(f"unknown tag {tag!r}")
    return leaf(data)


class _Encoder:
    def __init__(self, leaf: LeafEncoder | None) -> None:
        self._leaf = leaf
        self._open: set[int] = set()  # containers on the current path: cycle detection

    def encode(self, v: object, path: str) -> Any:
        t = type(v)
        if v is None or t is bool or t is int or t is str:
            return v
        if t is float:
            assert isinstance(v, float)
            return v if math.isfinite(v) else {TAG: "float", "v": repr(v)}
        if t is complex:
            assert isinstance(v, complex)
            return {TAG: "complex", "v": [self.encode(v.real, path), self.encode(v.imag, path)]}
        if t is bytes or t is bytearray:
            assert isinstance(v, (bytes, bytearray))
            return {TAG: t.__name__, "v": base64.b64encode(v).decode("ascii")}
        if t in (list, tuple, set, frozenset, dict, OrderedDict):
            return self._container(v, path)
        if self._leaf is not None:
            tag = self._leaf(v, path)
            if tag is not None:
                return tag
        raise unsupported(v, path)

    def _container(self, v: Any, path: str) -> Any:
        if id(v) in self._open:
            raise StoreError(
                f"Cannot save {path}: it contains itself (a reference cycle). A "
                f"checkpoint holds a tree of values; break the cycle or leave it out."
            )
        self._open.add(id(v))
        try:
            if type(v) is list:
                return [self.encode(x, f"{path}[{i}]") for i, x in enumerate(v)]
            if type(v) in (tuple, set, frozenset):
                items = [self.encode(x, f"{path}[{i}]") for i, x in enumerate(v)]
                return {TAG: type(v).__name__, "v": items}
            if type(v) is dict and TAG not in v and all(type(k) is str for k in v):
                return {k: self.encode(x, f"{path}[{k!r}]") for k, x in v.items()}
            pairs = [
                [_Encoder(None).encode(k, f"{path} key {k!r}"), self.encode(x, f"{path}[{k!r}]")]
                for k, x in v.items()
            ]
            if type(v) is dict:
                return {TAG: "dict", "v": pairs}
            out: dict[str, Any] = {TAG: "odict", "v": pairs}
            # torch keeps module versions in state_dict()._metadata; load_state_dict
            # reads them to upgrade old formats, so they travel with the dict.
            meta = getattr(v, "_metadata", None)
            if meta is not None:
                out["meta"] = self.encode(meta, f"{path}._metadata")
            return out
        finally:
            self._open.discard(id(v))


def unsupported(v: object, path: str) -> StoreError:
    kind = f"{type(v).__module__}.{type(v).__qualname__}".removeprefix("builtins.")
    return StoreError(
        f"Cannot save {path}: it is a {kind}, which is neither a tensor, a NumPy array "
        f"nor a plain value ({_SUPPORTED}). Convert it (to a tensor, or with its "
        f"state_dict()), or, for a notebook snapshot of objects you trust, pass "
        f"allow_pickle=True."
    )


def _pairs(data: Mapping[str, Any], leaf: LeafDecoder | None) -> list[tuple[Any, Any]]:
    out = []
    for pair in data["v"]:
        if not isinstance(pair, list) or len(pair) != 2:
            raise Malformed(f"dict item {pair!r} is not a [key, value] pair")
        out.append((decode(pair[0]), decode(pair[1], leaf)))
    return out


def _items(data: Mapping[str, Any], leaf: LeafDecoder | None) -> list[Any]:
    items = data["v"]
    if not isinstance(items, list):
        raise Malformed(f"expected a list, got {type(items).__name__}")
    return [decode(x, leaf) for x in items]


def _odict(data: Mapping[str, Any], leaf: LeafDecoder | None) -> OrderedDict[Any, Any]:
    out: OrderedDict[Any, Any] = OrderedDict(_pairs(data, leaf))
    if "meta" in data:
        out._metadata = decode(data["meta"])  # type: ignore[attr-defined]
    return out


def _float(data: Mapping[str, Any], leaf: LeafDecoder | None) -> float:
    return _NONFINITE[data["v"]]


def _complex(data: Mapping[str, Any], leaf: LeafDecoder | None) -> complex:
    re, im = (decode(x) for x in data["v"])
    if not isinstance(re, float) or not isinstance(im, float):
        raise Malformed("complex parts are not floats")
    return complex(re, im)


def _bytes(data: Mapping[str, Any], leaf: LeafDecoder | None) -> bytes | bytearray:
    raw = base64.b64decode(data["v"], validate=True)
    return bytearray(raw) if data[TAG] == "bytearray" else raw


_DECODERS: dict[str, Callable[[Mapping[str, Any], LeafDecoder | None], Any]] = {
    "tuple": lambda d, leaf: tuple(_items(d, leaf)),
    "set": lambda d, leaf: set(_items(d, leaf)),
    "frozenset": lambda d, leaf: frozenset(_items(d, leaf)),
    "dict": lambda d, leaf: dict(_pairs(d, leaf)),
    "odict": _odict,
    "float": _float,
    "complex": _complex,
    "bytes": _bytes,
    "bytearray": _bytes,
}
