"""Elastic data-parallel training on Dask that survives the loss of workers (``ft.fit``).

A run lives in three kinds of process, one folder each, which never import each other:

- ``kernel/``: :func:`fit` checks what it is given and submits the run; a :class:`Run`
  handle, in any kernel, follows the run's events (the fold every view reads);
- ``coordinator/``: a SchedulerPlugin that drives every run of the cluster, generation
  by generation, and publishes the run's events;
- ``rank/``: one rank actor per worker and run, which trains in standalone process
  groups, keeps durable checkpoints and reports back.

They meet in :mod:`.protocol` (the named handlers they call each other by, plans,
reports) and :mod:`.spec` (what ``fit`` hands to the ranks and to the coordinator),
and share a few pure helpers (:mod:`._sharding`, :mod:`._robust`, :mod:`._schedule`,
:mod:`._earlier`). The names below load lazily, so a scheduler that imports the
coordinator loads neither the kernel's code nor the ranks' (nor torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ft_notebook.train._sharding import DataCursor, epoch_order
    from ft_notebook.train.kernel import Run, attach, fit, format_run, runs

__all__ = [
    "DataCursor",
    "Run",
    "attach",
    "epoch_order",
    "fit",
    "format_run",
    "runs",
]

_HOMES = {
    "DataCursor": "ft_notebook.train._sharding",
    "epoch_order": "ft_notebook.train._sharding",
    "Run": "ft_notebook.train.kernel",
    "attach": "ft_notebook.train.kernel",
    "fit": "ft_notebook.train.kernel",
    "format_run": "ft_notebook.train.kernel",
    "runs": "ft_notebook.train.kernel",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ft_notebook.train' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
