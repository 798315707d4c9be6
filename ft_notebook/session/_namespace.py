"""What in a kernel's namespace is the user's state, and the random state cells see.

IPython keeps its own machinery in the user namespace (``In``, ``Out``, ``_i3``,
``get_ipython``...) and users import modules there; neither is state to snapshot.
Random number generator states are captured before each cell so that a cell
replayed after a crash draws the same numbers it drew the first time.
"""

from __future__ import annotations

import ast
import base64
import pickle
import random
import sys
import types
from collections.abc import Mapping
from typing import Any

import xxhash

_IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython", "open"})


def user_variables(
    ns: Mapping[str, Any], hidden: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The variables of ``ns`` that are the user's state, by name."""
    hidden = hidden or {}
    out = {}
    for name, value in ns.items():
        if name.startswith("_") or name in _IPYTHON_NAMES:
            continue
        if name in hidden and hidden[name] is value:
            continue
        if isinstance(value, types.ModuleType):
            continue
        out[name] = value
    return out


def imported_modules(ns: Mapping[str, Any]) -> dict[str, str]:
    """Names bound to modules (``import numpy as np``): restored by importing again."""
    return {
        name: value.__name__
        for name, value in ns.items()
        if isinstance(value, types.ModuleType) and not name.startswith("_")
    }


def capture_rng(*, start_numpy: bool = False) -> dict[str, Any]:
    """The global random states of Python, numpy and torch (those in use).

    numpy's global generator exists only once ``numpy.random`` is imported, which
    ``import numpy`` does not do. ``start_numpy`` imports it where numpy is loaded, so
    that a cell that goes on to use it starts from a state on record; without it (a
    restore saving the kernel's own state around a replay) it is read only if there.
    """
    state: dict[str, Any] = {}
    version, internal, gauss = random.getstate()
    state["python"] = [version, list(internal), gauss]
    if start_numpy and "numpy" in sys.modules:
        import numpy.random  # noqa: F401
    numpy_state = _numpy_state()
    if numpy_state is not None:
        state["numpy"] = numpy_state
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode()
    return state


def drop_unused_rng(before: dict[str, Any]) -> None:
    """Forget numpy's state in ``before`` (a cell's capture) if the cell left it as it
    was: its replay then need not import ``numpy.random`` (7 ms of a restore)."""
    if "numpy" in before and _numpy_state() == before["numpy"]:
        del before["numpy"]


def _numpy_state() -> list[Any] | None:
    np_random = sys.modules.get("numpy.random")
    if np_random is None:
        return None
    kind, keys, pos, has_gauss, cached = np_random.get_state()
    return [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)]


def restore_rng(state: Mapping[str, Any]) -> None:
    """Put back the states :func:`capture_rng` returned (imports what it needs)."""
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "torch" in state:
        import torch

        raw = bytearray(base64.b64decode(state["torch"]))
        torch.set_rng_state(torch.frombuffer(raw, dtype=torch.uint8).clone())


def _state_of(values: Mapping[str, Any]) -> str:
    parts = []
    for name, value in sorted(values.items()):
        try:
            parts.append(f"{name}={xxhash.xxh3_64_hexdigest(pickle.dumps(value))}")
        except Exception:  # an unpicklable local: its type is all we can compare
            parts.append(f"{name}:{type(value).__qualname__}")
    return " ".join(parts)


def describe(value: Any) -> str:
    """A fingerprint of an object pickle cannot carry, from what is observable of it.

    Two replays that built the same generator, lock or file in the same state give
    the same description; one advanced, locked or moved differently does not.
    """
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if isinstance(value, types.GeneratorType):
        frame = value.gi_frame
        if frame is None:
            return f"{kind} {value.gi_code.co_qualname} finished"
        # A loop suspends at the same instruction every time: its locals (the loop's
        # iterator among them) tell how far it got.
        return f"{kind} {value.gi_code.co_qualname} at {frame.f_lasti} {_state_of(frame.f_locals)}"
    locked = getattr(value, "locked", None)
    if callable(locked):
        return f"{kind} locked={locked()}"
    if hasattr(value, "closed") and hasattr(value, "mode"):
        position = "closed" if value.closed else f"at {value.tell()}"
        return f"{kind} {getattr(value, 'name', '?')} mode={value.mode} {position}"
    return kind


def inputs_of(code: str) -> set[str]:
    """Names a cell reads but does not bind itself: what its replay needs restored first."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    loaded: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
    return loaded - bound


def generator_states(namespace: Mapping[str, Any], names: set[str]) -> dict[str, Any]:
    """The states of the random generators among ``names`` (numpy ``Generator``,
    ``random.Random``, ``torch.Generator``): a cell that draws from one advances it,
    so its replay must start it where it stood before the cell, as with the global
    random states."""
    states: dict[str, Any] = {}
    for name in names:
        value = namespace.get(name)
        np_random = sys.modules.get("numpy.random")
        if np_random is not None and isinstance(value, np_random.Generator):
            states[name] = {"numpy": _plain(value.bit_generator.state)}
        elif isinstance(value, random.Random):
            version, internal, gauss = value.getstate()
            states[name] = {"python": [version, list(internal), gauss]}
        else:
            torch = sys.modules.get("torch")
            if torch is not None and isinstance(value, torch.Generator):
                raw = value.get_state().numpy().tobytes()
                states[name] = {"torch": base64.b64encode(raw).decode()}
    return states


def set_generator_state(value: Any, state: Mapping[str, Any]) -> None:
    """Put a state :func:`generator_states` took back into the generator ``value``."""
    if "numpy" in state and hasattr(value, "bit_generator"):
        value.bit_generator.state = _arrays(state["numpy"])
    elif "python" in state and isinstance(value, random.Random):
        version, internal, gauss = state["python"]
        value.setstate((version, tuple(internal), gauss))
    elif "torch" in state and hasattr(value, "set_state"):
        import torch

        raw = bytearray(base64.b64decode(state["torch"]))
        value.set_state(torch.frombuffer(raw, dtype=torch.uint8).clone())


def _plain(state: Any) -> Any:
    """A bit generator's state as JSON can hold it (MT19937 keeps an array)."""
    if isinstance(state, dict):
        return {k: _plain(v) for k, v in state.items()}
    if hasattr(state, "tolist") and hasattr(state, "dtype"):
        return {"ndarray": state.tolist(), "dtype": str(state.dtype)}
    return state


def _arrays(state: Any) -> Any:
    if isinstance(state, dict):
        if set(state) == {"ndarray", "dtype"}:
            import numpy as np

            return np.array(state["ndarray"], dtype=state["dtype"])
        return {k: _arrays(v) for k, v in state.items()}
    return state
