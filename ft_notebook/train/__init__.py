"""Elastic data-parallel training on Dask that survives the loss of workers (``ft.fit``).

Data flow: :func:`fit` (kernel, :mod:`._run`) checks the spec (:mod:`._spec`) and
hands it to the :class:`~._coordinator.RunCoordinator` (a SchedulerPlugin), which
starts one :mod:`rank actor <._rank>` per worker and tells them, generation by
generation, who trains together (:mod:`._protocol`); it keeps each run's
:mod:`record <._record>` and :mod:`watches <._stall>` it (progress events, stalls).
Ranks train in standalone process groups (:mod:`._groups`) on the arithmetic of
:mod:`._trainer`, taking their samples from :mod:`._sharding`, keep durable
checkpoints (:mod:`._durable`), and report back through the scheduler's event log. A
:class:`Run` (:mod:`._handle`) in any kernel follows the coordinator's record.
"""

from __future__ import annotations

from ft_notebook.train._handle import Run, attach, format_run, runs
from ft_notebook.train._run import fit
from ft_notebook.train._sharding import DataCursor, epoch_order

__all__ = [
    "DataCursor",
    "Run",
    "attach",
    "epoch_order",
    "fit",
    "format_run",
    "runs",
]
