"""A library's module-level objects are pickled as themselves, not as copies.

``scipy.stats.t`` is one object, held by ``scipy.stats``, and it draws from numpy's
global generator. A variable that holds it (statsmodels' ``PredictionResults.dist``)
pickled by value came back holding a copy of the distribution with a private copy
of the generator: the notebook's next cell drew other numbers than it drew before
the kill, and no comparison of the copy with the live object could tell (a
generator has no attributes to compare). So an object that the module of its class
holds at module level (``scipy.stats._continuous_distns.t``,
``numpy.random.mtrand._rand``) is pickled as that module's attribute, with the state
it had: the restore takes the new kernel's object of that name and puts the state
back on it, as a notebook that set ``scipy.stats.norm.random_state`` had it.

The global generators ft puts back as process state (numpy's legacy ``np.random``,
``random``'s) go by name alone: ``%ft restore --no-global-state`` leaves them as
the new kernel has them. When a snapshot loads a pickle again to check its round
trip, the state is not put back: the live object must not change under the notebook.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

#: modules whose objects are the notebook's own or the interpreter's: never by name
_NOT_LIBRARIES = frozenset({"__main__", "builtins"})
_NOT_GLOBALS = (type, types.FunctionType, types.ModuleType, types.BuiltinFunctionType)

# module name -> (its namespace's size when indexed, id of each value -> its name)
_INDEX: dict[str, tuple[int, dict[int, str]]] = {}
_CHECKING: ContextVar[bool] = ContextVar("ft_singletons_checking", default=False)

Reduced = tuple[Callable[..., Any], tuple[str, str], Any, None, None, Callable[[Any, Any], None]]


def reduce(obj: Any) -> Reduced | None:
    """``obj`` as its module's attribute with its state, or None when it is not a
    library's module-level object (pickle decides)."""
    if isinstance(obj, _NOT_GLOBALS):
        return None
    module_name = getattr(type(obj), "__module__", None)
    if not isinstance(module_name, str) or module_name in _NOT_LIBRARIES:
        return None
    module = sys.modules.get(module_name)
    if module is None:
        return None
    name = _name_in(module, module_name, obj)
    if name is None:
        return None
    state = None if _is_process_state(obj) else _state_of(obj)
    return (library_global, (module_name, name), state, None, None, put_back)


def _name_in(module: types.ModuleType, module_name: str, obj: Any) -> str | None:
    namespace = vars(module)
    indexed = _INDEX.get(module_name)
    if indexed is None or indexed[0] != len(namespace):
        indexed = (len(namespace), {id(v): k for k, v in list(namespace.items())})
        _INDEX[module_name] = indexed
    name = indexed[1].get(id(obj))
    if name is None or namespace.get(name) is not obj:
        return None  # not a global, or an id its module's namespace no longer holds
    return name


def _is_process_state(obj: Any) -> bool:
    random = sys.modules.get("random")
    mtrand = sys.modules.get("numpy.random.mtrand")
    return (random is not None and obj is getattr(random, "_inst", None)) or (
        mtrand is not None and obj is getattr(mtrand, "_rand", None)
    )


def _state_of(obj: Any) -> Any:
    """What pickle would have rebuilt the object's state from (its ``__reduce_ex__``'s
    third item), or None: items a list or dict subclass holds are not appended again."""
    try:
        reduced = obj.__reduce_ex__(5)
    except Exception:  # a copy could not have been made either: the name is enough
        return None
    if isinstance(reduced, tuple) and len(reduced) > 2:
        return reduced[2]
    return None


def library_global(module_name: str, name: str) -> Any:
    """The new kernel's object of that name; raises if the library no longer has it."""
    module = importlib.import_module(module_name)
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"{module_name} has no {name} in this kernel") from None


def put_back(obj: Any, state: Any) -> None:
    """Put ``state`` back on ``obj`` as pickle's BUILD would (not while checking)."""
    if state is None or _CHECKING.get():
        return
    setstate = getattr(obj, "__setstate__", None)
    if setstate is not None:
        setstate(state)
        return
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    if state:
        vars(obj).update(state)
    for key, value in (slots or {}).items():
        setattr(obj, key, value)


@contextlib.contextmanager
def checking() -> Iterator[None]:
    """Loads in this block leave the live module-level objects as they are."""
    token = _CHECKING.set(True)
    try:
        yield
    finally:
        _CHECKING.reset(token)
