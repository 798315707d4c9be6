"""Functions defined in the notebook, rebuilt bound to the namespace they come back to.

cloudpickle carries a function defined in a cell by value, with a private copy of
the globals it reads: restored that way, ``f`` keeps seeing ``scale = 2`` after the
notebook sets ``scale = 10``, and ``bump()`` increments a counter nobody else sees.
A function whose globals are the notebook's namespace is pickled instead with a
reference to "the namespace" (no values), and comes back with the restored
namespace as its ``__globals__``; its closure cells, defaults and attributes come
back as they were. The same holds for methods of notebook classes and for functions
held in containers or objects: they are functions of that namespace too.

The functions here are the read side: a snapshot names them by reference, and a
restore needs neither cloudpickle nor anything else to run them.
"""

from __future__ import annotations

import types
from typing import Any


def make_function(
    code: types.CodeType,
    namespace: dict[str, Any],
    name: str,
    defaults: tuple[Any, ...] | None,
    closure: tuple[Any, ...] | None,
) -> types.FunctionType:
    """A function of ``code`` whose globals are ``namespace`` itself (not a copy).

    Nothing is written into ``namespace``: a restore touches the notebook's
    namespace only once every variable was rebuilt."""
    return types.FunctionType(code, namespace, name, defaults, closure)


def set_function_state(
    func: types.FunctionType, state: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    """cloudpickle's function state put back without its copy of the globals."""
    attributes, slots = state
    func.__dict__.update(attributes)
    slots = dict(slots)
    slots.pop("__globals__", None)
    slots.pop("_cloudpickle_submodules", None)  # loading them imported them: done
    closure = slots.pop("__closure__", None)
    if closure is not None and func.__closure__ is not None:
        for cell, target in zip(closure, func.__closure__, strict=True):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell (a name bound later in its scope)
                continue
            target.cell_contents = value
    for key, value in slots.items():
        setattr(func, key, value)
