"""Whether an object comes back from its pickle as it is: checked at snapshot time.

The bytes of a pickle can be exact while what they rebuild is not the object that
was pickled: a library's ``__reduce__``/``__setstate__`` may set an attribute on
the way back (statsmodels' ``NegativeBinomial`` comes back with ``_transparams``
True where it was False, and its ``loglike`` then gives other numbers). So the
first time a variable that is not plain data is pickled in a given state, its
pickle is loaded again and the copy compared with the live object, attribute by
attribute, arrays and tensors by content (an attribute its ``__getstate__`` leaves
out on purpose, a cache or a flag, is not a difference). A difference is the
variable's ``warning``: where the cell that made it is known, the restore replays
that cell and keeps the replay if it matches the value's content fingerprint;
otherwise it restores the pickled copy and says how it differs. Never silently.

The comparison looks at what can be compared without running the object's code
beyond ``==`` on leaves; what it cannot tell apart it takes as equal. Objects whose
arrays hold more than ``LARGEST`` bytes, and pickles that reopen files, are not
loaded again. The check costs one load per variable per state it is snapshotted in.
"""

from __future__ import annotations

import math
import sys
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ft_notebook.session import _reducers, _singletons
from ft_notebook.session._objects import BufferRecord, SnapshotUnpickler, rebuild_buffer

#: Objects with more bulk data than this are not loaded again: the copy would double
#: their memory for a moment (their arrays come back byte for byte in any case).
LARGEST = 256 << 20

_SCALARS = (int, float, complex, str, bytes, bool, type(None), range)
_CONTAINERS = (list, tuple, dict, set, frozenset)
# Functions and classes go by reference or by code; a weak reference, a bound
# method or a callback id points at objects that are new in any copy: none of these
# says anything about the value.
_UNCOMPARABLE = (
    types.FunctionType,
    type,
    types.ModuleType,
    types.MethodType,
    types.BuiltinMethodType,
    types.MethodWrapperType,
    weakref.ReferenceType,
    weakref.ProxyType,
    weakref.CallableProxyType,
)
# Libraries whose objects rebuild their internals on unpickling by design (a figure
# gets a new canvas, new callback ids, new transforms' parents): their copies differ
# in those internals, not in what they draw.
_REBUILT_BY_DESIGN = ("matplotlib.", "mpl_toolkits.")
# Differences deeper than this are internals (caches, registries), not the flags and
# settings a user's next call depends on.
_DEPTH = 4
_ITEMS = 10_000


def is_plain(value: Any, depth: int = 3) -> bool:
    """Data pickle carries by construction: scalars, containers of them, arrays,
    tensors, pandas objects, functions and classes (checked in other ways)."""
    if isinstance(value, _SCALARS):
        return True
    kind = type(value)
    module = kind.__module__.split(".", 1)[0]
    if module in ("numpy", "torch", "pandas") and kind.__name__ in (
        "ndarray",
        "Tensor",
        "Parameter",
        "DataFrame",
        "Series",
        "Index",
    ):
        return True
    if isinstance(value, (types.FunctionType, type, types.ModuleType)):
        return True
    if kind in _CONTAINERS and depth > 0:
        items = value.values() if kind is dict else value
        return all(is_plain(v, depth - 1) for _, v in zip(range(_ITEMS), items, strict=False))
    return False


def pickling_notes(entries: Mapping[str, Any]) -> dict[str, str]:
    """What a snapshot says of the variables it keeps, but not as they are: those
    pickling changes, and those that hold one of them (pickled by reference to it, so
    their own round trip, done against the live variable, cannot see it)."""
    notes = {}
    for name, entry in entries.items():
        if entry.how == "pickle" and not entry.warning:
            held = holds_changed(entry.refs, entries)
            if held:
                notes[name] = (
                    f"it holds `{held}`, which changes when pickled: a restore brings it "
                    f"back holding `{held}` as that comes back, and says so if changed"
                )
        if entry.how != "pickle" or not entry.warning:
            continue
        if entry.warning.startswith("it shares memory"):
            notes[name] = entry.warning
        elif entry.content:
            notes[name] = (
                f"it changes when pickled ({entry.warning}): a restore replays the cell "
                f"that made it, or brings back the changed copy and says so"
            )
        else:
            notes[name] = (
                f"it changes when pickled ({entry.warning}): a restore brings back the "
                f"changed copy and says so; run the cell that made it again"
            )
    return notes


def holds_changed(refs: tuple[str, ...], entries: Mapping[str, Any]) -> str:
    """The first variable among ``refs`` that pickling changes, or that holds one in
    turn (as a restore says it, a variable at a time); "" if none."""

    def changed(name: str, seen: set[str]) -> bool:
        entry = entries.get(name)
        if name in seen or entry is None or entry.how != "pickle":
            return False
        seen.add(name)
        if entry.warning and not entry.warning.startswith("it shares memory"):
            return True
        return any(changed(r, seen) for r in entry.refs)

    return next((r for r in refs if changed(r, set())), "")


def opens_handles(data: bytes) -> bool:
    """Whether loading the pickle opens files or databases (see ``_reducers``)."""
    return any(name in data for name in _reducers.OPENERS)


def unpickled_copy(
    data: bytes,
    records: Mapping[str, BufferRecord],
    out_of_band: tuple[str, ...],
    chunks: Mapping[str, memoryview],
    resolve_var: Callable[[str], Any],
    namespace: dict[str, Any],
) -> Any:
    """Load a pickle the snapshot is about to store, from the bytes in memory."""

    def read_into(digest: str, out: memoryview) -> None:
        out[:] = chunks[digest]

    def load(key: str) -> Any:
        return rebuild_buffer(records[key], read_into)

    unpickler = SnapshotUnpickler(
        data, resolve_var, load, [load(k) for k in out_of_band], namespace=namespace, tensors={}
    )
    with _singletons.checking():  # a library's objects come back as the live ones
        return unpickler.load_as_notebook()


def difference(live: Any, copy: Any) -> str:
    """How ``copy`` differs from ``live`` (the first difference found), or ""."""
    return _diff(live, copy, "", _DEPTH, set()) or ""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _diff(a: Any, b: Any, path: str, depth: int, seen: set[tuple[int, int]]) -> str | None:
    where = f"`{path}`" if path else "the object"
    if a is b:
        return None
    kind = type(a)
    if isinstance(a, _UNCOMPARABLE) or kind.__module__.startswith(_REBUILT_BY_DESIGN):
        return None
    if type(b) is not kind:
        return f"{where} {kind.__name__} → {type(b).__name__}"
    if depth == 0 or (id(a), id(b)) in seen:
        return None
    seen.add((id(a), id(b)))
    special = _compare_special(a, b)
    if special is not None:
        return None if special else f"{where} content differs"
    if kind is float:
        if a == b or (math.isnan(a) and math.isnan(b)):
            return None
        return f"{where} {a!r} → {b!r}"
    if isinstance(a, _SCALARS):
        return None if a == b else f"{where} {_show(a)} → {_show(b)}"
    if isinstance(a, dict):
        return _diff_dicts(a, b, path, where, depth, seen)
    if kind in (list, tuple):
        if len(a) != len(b):
            return f"{where} length {len(a)} → {len(b)}"
        for i, (x, y) in enumerate(zip(a[:_ITEMS], b[:_ITEMS], strict=True)):
            found = _diff(x, y, f"{path}[{i}]", depth - 1, seen)
            if found:
                return found
        return None
    state_a, state_b = _attributes(a), _attributes(b)
    if state_a is not None and state_b is not None:
        for key in sorted(state_a.keys() & state_b.keys()):
            name = f"{path}.{key}" if path else key
            if key not in state_a or key not in state_b:
                continue  # left out by its __getstate__ (a cache, a flag): on purpose
            found = _diff(state_a[key], state_b[key], name, depth - 1, seen)
            if found:
                return found
        return None
    return _by_equality(a, b, where)


def _diff_dicts(
    a: dict[Any, Any], b: dict[Any, Any], path: str, where: str, depth: int, seen: set[Any]
) -> str | None:
    if len(a) != len(b):
        return f"{where} {len(a)} items → {len(b)}"
    if a.keys() == b.keys():
        pairs = [(k, k) for k in list(a)[:_ITEMS]]
    else:  # keys that are objects (an optimizer's state by parameter): in order
        pairs = list(zip(list(a)[:_ITEMS], list(b)[:_ITEMS], strict=True))
    for key_a, key_b in pairs:
        label = f"{path}[{_show(key_a)}]"
        found = _diff(key_a, key_b, label, depth - 1, seen)
        found = found or _diff(a[key_a], b[key_b], label, depth - 1, seen)
        if found:
            return found
    return None


def _compare_special(a: Any, b: Any) -> bool | None:
    """Arrays, tensors and pandas objects by content; None for other objects."""
    np = sys.modules.get("numpy")
    if np is not None and isinstance(a, np.ndarray):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        try:
            return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        except Exception:  # object arrays of incomparable items: cannot tell
            return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        a, b = a.detach().cpu(), b.detach().cpu()
        same_nan = torch.isnan(a).equal(torch.isnan(b)) if a.is_floating_point() else True
        return bool(same_nan and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)))
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(a, (pd.DataFrame, pd.Series, pd.Index)):
        return bool(a.equals(b))
    return None


def _attributes(obj: Any) -> dict[str, Any] | None:
    state = getattr(obj, "__dict__", None)
    found = dict(state) if isinstance(state, dict) else None
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot in ("__dict__", "__weakref__"):
                continue
            if found is None:
                found = {}
            if hasattr(obj, slot):
                found[slot] = getattr(obj, slot)
    return found


def _by_equality(a: Any, b: Any, where: str) -> str | None:
    equality: Any = type(a).__eq__
    if equality is object.__eq__:
        return None  # identity only: nothing to compare
    try:
        same = a == b
        if not isinstance(same, bool):
            return None
    except Exception:  # its == cannot compare: cannot tell
        return None
    return None if same else f"{where} {_show(a)} → {_show(b)}"
