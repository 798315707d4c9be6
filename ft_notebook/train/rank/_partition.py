"""The drill of a worker that cannot meet its peers (``%ft chaos isolate``).

An isolated worker's ranks go to every new rendezvous under a prefix of their own,
where no peer ever comes: to the run it looks like a host the others cannot reach.
Groups it already belongs to keep working (their connections exist). ``%ft chaos
resume`` undoes it. One machine cannot cut the network between its own processes
without root and a firewall, so this is the one fault of the drills that is
simulated, at the rendezvous, rather than made with a signal.
"""

from __future__ import annotations

import threading
from typing import Any

_ISOLATED = threading.Event()


def isolated() -> bool:
    """Whether this worker process is isolated."""
    return _ISOLATED.is_set()


def isolate(dask_worker: Any = None) -> bool:
    """Isolate this worker (an RPC: ``client.run(isolate, ...)``); whether it was not yet."""
    was = _ISOLATED.is_set()
    _ISOLATED.set()
    return not was


def reconnect(dask_worker: Any = None) -> bool:
    """Undo :func:`isolate`; whether this worker was isolated."""
    was = _ISOLATED.is_set()
    _ISOLATED.clear()
    return was


def isolate_worker(client: Any, worker: str) -> str:
    """Isolate the worker named ``worker`` (or ``"random"``); returns its name."""
    chosen = _chosen(client, worker)
    client.run(isolate, workers=[chosen["address"]])
    return str(chosen["name"])


def reconnect_worker(client: Any, worker: str) -> bool:
    """Let the worker named ``worker`` meet its peers again; whether it was isolated."""
    chosen = _chosen(client, worker)
    return bool(client.run(reconnect, workers=[chosen["address"]]).get(chosen["address"]))


def _chosen(client: Any, worker: str) -> dict[str, Any]:
    from ft_notebook.cluster._remote import scheduler_workers
    from ft_notebook.cluster.chaos import choose

    return choose(client.run_on_scheduler(scheduler_workers), worker, None)
