"""The rank side's entry points: named handlers on every worker.

:class:`RankHandlers` is a WorkerPlugin that adds the handlers of
:class:`~ft_notebook.train.protocol.RankOp` to every worker, also to those that join
or restart, as ``serve``'s replica handlers and Dask's own shuffle do. The
coordinator calls them with ``scheduler.rpc(address).ft_train_deliver(...)``, and a
kernel through the scheduler's ``broadcast``: nobody outside this folder imports a
function of it, and nothing is pickled to reach it. Each handler returns at once:
the work is done by the run's rank actor, on its own thread (:mod:`._actor`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from ft_notebook.train.protocol import RankOp
from ft_notebook.train.rank._actor import deliver, final_state, rank_logs, rank_state, start_rank

PLUGIN_NAME = "ft-notebook-ranks"

_HANDLERS: dict[RankOp, Callable[..., Any]] = {
    RankOp.START: start_rank,
    RankOp.DELIVER: deliver,
    RankOp.STATE: rank_state,
    RankOp.LOGS: rank_logs,
    RankOp.FINAL_STATE: final_state,
}


class RankHandlers(WorkerPlugin):
    """Adds the rank handlers to every worker (each is given the worker it runs on)."""

    name = PLUGIN_NAME
    idempotent = True

    def setup(self, worker: Any) -> None:
        worker.handlers.update({op.value: _bound(fn, worker) for op, fn in _HANDLERS.items()})


def _bound(fn: Callable[..., Any], worker: Any) -> Callable[..., Any]:
    """``fn`` given the worker it runs on; with its own name, which Dask logs."""

    @functools.wraps(fn)
    def handler(**kwargs: Any) -> Any:
        return fn(**kwargs, dask_worker=worker)

    return handler
