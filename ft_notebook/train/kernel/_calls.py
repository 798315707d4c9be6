"""How a kernel reaches a run: the coordinator's scheduler handler, the ranks' worker
handlers (see :mod:`ft_notebook.train.protocol`). Nothing here is pickled: actions,
names and the run's options go as plain values, the spec as the bytes ``fit`` made.
"""

from __future__ import annotations

from typing import Any

from ft_notebook.exceptions import TrainingError
from ft_notebook.train.protocol import SCHEDULER_HANDLER, RankOp, RunAction


class NoCoordinator(TrainingError):
    """The cluster's scheduler has no run coordinator of this version."""


def ask(client: Any, action: RunAction, **kwargs: Any) -> Any:
    """The coordinator's answer to ``action``, with its lists as lists (Dask's msgpack
    hands every array back as a tuple)."""
    handler = getattr(client.scheduler, SCHEDULER_HANDLER)
    answer = client.sync(handler, action=action.value, **kwargs)
    if answer is None:  # Dask's answer for a handler the scheduler does not have
        raise NoCoordinator(
            f"The cluster's scheduler has no {SCHEDULER_HANDLER!r} handler: ft.fit never "
            f"ran on it, or it runs another version of ft_notebook (its coordinator "
            f"predates this one). Start runs with ft.fit; for a cluster of an older "
            f"version, stop it (ft.down(...)) and start it again."
        )
    return _lists(answer)


def _lists(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    return value


def ask_every_worker(client: Any, op: RankOp, **kwargs: Any) -> dict[str, Any]:
    """Each live worker's answer to ``op`` (address -> answer, or the error it raised)."""
    message = {"op": op.value, **kwargs}
    return dict(client.sync(client.scheduler.broadcast, msg=message, on_error="return"))
