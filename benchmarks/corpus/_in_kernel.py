"""What ``bench_corpus.py`` runs inside a notebook's kernel, loaded with ``runpy`` so
that no name of it lands in the notebook's namespace.

- :func:`continuation`: the continuation cell of a notebook, generated from the
  variables its run left (the rule is in the docstring);
- :func:`time_ft_hooks`: wraps ft's cell hooks so each cell's snapshot pause (ft's
  pre-run and post-run work) is recorded on the shell, read by :func:`pauses`.
"""

from __future__ import annotations

import inspect
import json
import time
import types
from typing import Any

#: at most this many calls of each kind, so that a continuation stays short
LIMIT = 12

SUMMARY = r"""
import re as _re
def _summ(v):
    import numpy as np
    try:
        import pandas as pd
    except ImportError:
        pd = None
    if isinstance(v, np.ndarray):
        if v.dtype.kind in "biufc":
            return f"ndarray{v.shape} {v.dtype} sum={complex(np.nansum(v))!r} head={v.ravel()[:3].tolist()!r}"
        return f"ndarray{v.shape} {v.dtype} head={[str(x) for x in v.ravel()[:3]]!r}"
    if pd is not None and isinstance(v, (pd.DataFrame, pd.Series)):
        num = v.select_dtypes("number") if isinstance(v, pd.DataFrame) else v
        s = num.to_numpy(dtype=float, na_value=np.nan).sum() if num.dtypes is not None and len(num) else 0
        return f"{type(v).__name__}{v.shape} numeric-sum={float(s)!r}"
    if isinstance(v, float):
        return repr(v)
    return _re.sub(r" at 0x[0-9a-f]+", "", repr(v))[:300]
def _step(label, fn):
    try:
        print(label, "->", _summ(fn()))
    except Exception as e:
        print(label, "-> raised", type(e).__name__)
"""


def continuation(ns: dict[str, Any], hidden: dict[str, Any]) -> str:
    """The continuation cell of a notebook whose run left ``ns``.

    The rule, in the order the cell runs its steps (each prints one line; a step that
    raises prints the exception's type, so errors are compared too):

    1. draws from the global generators: ``np.random.rand()``, ``random.random()``;
    2. draws from each generator variable (``np.random.Generator``, ``RandomState``,
       ``random.Random``);
    3. calls each function defined in the notebook that takes no required argument;
    4. uses each fitted model: a statsmodels-like result (``params`` and ``predict``)
       through ``.predict()`` (its fitted values), a fitted scikit-learn-like estimator
       (``predict`` and ``n_features_in_``) through ``.predict`` on the first 5 rows
       of the first 2-D array or frame variable with that many columns;
    5. writes through each array variable that is a view of another array variable
       (``+1`` at its first element), then reads the other.

    At most ``LIMIT`` steps of each kind, variables in name order.
    """
    import random

    import numpy as np

    names = sorted(
        n
        for n in ns
        if not n.startswith("_")
        and n not in hidden
        and n not in ("In", "Out", "exit", "quit", "get_ipython", "open")
    )
    lines = [SUMMARY, "import numpy as _np_c, random as _random_c"]
    lines.append('_step("np.random.rand()", lambda: _np_c.random.rand())')
    lines.append('_step("random.random()", lambda: _random_c.random())')
    gens = [n for n in names if isinstance(ns[n], (np.random.Generator, random.Random))]
    gens += [n for n in names if isinstance(ns[n], np.random.RandomState)]
    for n in gens[:LIMIT]:
        draw = "random" if isinstance(ns[n], (np.random.Generator, random.Random)) else "rand"
        lines.append(f'_step("{n}.{draw}()", lambda: {n}.{draw}())')
    funcs = [n for n in names if _no_arg_function(ns[n])]
    for n in funcs[:LIMIT]:
        lines.append(f'_step("{n}()", lambda: {n}())')
    frames = [n for n in names if _two_d(ns[n])]
    models = 0
    for n in names:
        v = ns[n]
        if models >= LIMIT or isinstance(v, type):
            continue
        if _has(v, "params") and _has(v, "predict") and callable(v.predict):
            lines.append(f'_step("{n}.predict()", lambda: {n}.predict())')
            models += 1
        elif _has(v, "predict") and _has(v, "n_features_in_"):
            data = next((f for f in frames if _columns(ns[f]) == v.n_features_in_), None)
            if data is not None:
                lines.append(f'_step("{n}.predict({data}[:5])", lambda: {n}.predict({data}[:5]))')
                models += 1
    views = 0
    arrays = [n for n in names if isinstance(ns[n], np.ndarray) and ns[n].dtype.kind in "biuf"]
    for a in arrays:
        va = ns[a]
        if views >= LIMIT or va.base is None or not va.flags.writeable or va.size == 0:
            continue
        for b in arrays:
            if b != a and ns[b] is not va and np.shares_memory(va, ns[b]):
                lines.append(
                    f'_step("{a}.flat[0] += 1; {b}", '
                    f"lambda: ({a}.__setitem__((0,) * {a}.ndim, {a}.flat[0] + 1), {b})[1])"
                )
                views += 1
                break
    return "\n".join(lines) + "\n"


def _has(v: Any, attr: str) -> bool:
    try:
        return hasattr(v, attr)
    except Exception:
        return False


def _no_arg_function(v: Any) -> bool:
    if not isinstance(v, types.FunctionType) or v.__module__ != "__main__":
        return False
    try:
        sig = inspect.signature(v)
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in sig.parameters.values()
    )


def _two_d(v: Any) -> bool:
    return getattr(type(v), "__name__", "") in ("ndarray", "DataFrame") and len(v.shape) == 2


def _columns(v: Any) -> int:
    return int(v.shape[1])


def time_ft_hooks(shell: Any) -> None:
    """Record ft's own work around each cell (its snapshot pause) in
    ``shell._ft_corpus_pauses``, in seconds, one entry per cell."""
    from ft_notebook.magics import snapshots_of

    snaps = snapshots_of(shell)
    record: list[float] = []
    shell._ft_corpus_pauses = record
    pending = [0.0]

    def pre(info: Any) -> None:
        start = time.perf_counter()
        snaps.pre_run_cell(info)
        pending[0] = time.perf_counter() - start

    def post(result: Any) -> None:
        start = time.perf_counter()
        snaps.post_run_cell(result)
        record.append(pending[0] + time.perf_counter() - start)

    shell.events.unregister("pre_run_cell", snaps.pre_run_cell)
    shell.events.unregister("post_run_cell", snaps.post_run_cell)
    shell.events.register("pre_run_cell", pre)
    shell.events.register("post_run_cell", post)


def pauses(shell: Any) -> str:
    return "FTPAUSES" + json.dumps(getattr(shell, "_ft_corpus_pauses", []))
