"""Grow or shrink a running private cluster in place: nannies added or retired in its daemon.

The daemon (:mod:`._daemon`) runs the scheduler and the nannies in one event loop, so
:func:`scale` has a client run :func:`scheduler_scale` there (``run_on_scheduler``):
it starts nannies as the daemon starts its own (same spec: certificates, preload,
memory limit, how worker processes start), named with the lowest free ``cpuN``, or
retires the newest workers (Dask moves their data first, then closes the nanny, which
therefore does not restart it). Added worker processes are the daemon's children, so
``down()`` ends them with it. A retired worker is no fault: the control plane forgets
it instead of keeping it ``lost``. The daemon writes the new worker pids to the
registry within a second; :func:`scale` returns once it has.

Only CPU clusters scale: a GPU cluster has one worker per GPU.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ft_notebook.exceptions import ClusterError

if TYPE_CHECKING:
    from ft_notebook.cluster._registry import ClusterInfo

#: The most workers one cluster scales to (each is a process with torch loaded).
MAX_WORKERS = 64
_CPU_NAME = re.compile(r"cpu(\d+)")


def scale(name: str, workers: int, *, timeout: float = 60.0) -> ClusterInfo:
    """Scale your running CPU cluster ``name`` to ``workers`` workers; return its
    registry entry once it lists them.

    Raises:
        ClusterError: no such cluster, a GPU cluster, ``workers`` out of range, or
            the workers did not start (the message says why).
        ClusterUnreachable: its scheduler does not answer.
    """
    from ft_notebook.cluster._api import _registry, connect

    if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= MAX_WORKERS:
        raise ClusterError(f"workers={workers!r} must be a whole number from 1 to {MAX_WORKERS}.")
    registry = _registry()
    info = registry.get(name)
    if info is None:
        raise ClusterError(
            f"No cluster named {name!r} runs for you; start it with "
            f"`ft-notebook cluster up --name {name}` or ft.cluster(name={name!r})."
        )
    if info.gpus:
        raise ClusterError(
            f"Cluster {name!r} runs one worker per GPU ({list(info.gpus)}), so it does not "
            f"scale; stop it and start it with other gpus= instead."
        )
    client = connect(info, set_as_default=False)
    try:
        client.run_on_scheduler(
            scheduler_scale, spec_path=str(Path(info.log).parent / "spec.json"), workers=workers
        )
    except (ValueError, RuntimeError, TimeoutError, OSError) as e:
        raise ClusterError(
            f"Cluster {name!r} could not be scaled to {workers} workers: {e}. See its log "
            f"{info.log}."
        ) from e
    finally:
        client.close()

    deadline = time.monotonic() + timeout
    while True:
        now = registry.get(name)
        if now is not None and len(now.workers) == workers:
            return now
        if time.monotonic() > deadline:
            seen = "it stopped" if now is None else f"it lists {len(now.workers)}"
            raise ClusterError(
                f"Cluster {name!r} was scaled to {workers} workers, but after {timeout:g} s "
                f"{seen}. See its log {info.log}."
            )
        time.sleep(0.1)  # the daemon rewrites its entry every second


async def scheduler_scale(dask_scheduler: Any, spec_path: str, workers: int) -> list[str]:
    """In the cluster's daemon: add or retire workers until ``workers`` run; return
    their names."""
    from ft_notebook.cluster._control import PLUGIN_NAME
    from ft_notebook.cluster._daemon import make_nanny
    from ft_notebook.cluster._spec import ClusterSpec, WorkerSpec

    names = {str(ws.name): address for address, ws in dask_scheduler.workers.items()}
    if len(names) > workers:
        newest = sorted(names, key=_index)[workers:]
        plane = dask_scheduler.plugins.get(PLUGIN_NAME)
        if plane is not None:  # leaving on purpose is no fault
            for name in newest:
                plane._evicting[names[name]] = (time.time(), "retired: the cluster was scaled down")
        await dask_scheduler.retire_workers(
            names=newest, close_workers=True, remove=True, stimulus_id=f"ft-scale-{time.time()}"
        )
        if plane is not None:
            for name in newest:
                plane.members.pop(name, None)
    elif len(names) < workers:
        spec = ClusterSpec.load(Path(spec_path))
        free = (f"cpu{i}" for i in range(MAX_WORKERS * 2) if f"cpu{i}" not in names)
        added = [
            make_nanny(spec, WorkerSpec(next(free)), dask_scheduler.address)
            for _ in range(workers - len(names))
        ]
        _ADDED.extend(added)
        await asyncio.wait_for(
            asyncio.gather(*(n.start() for n in added)), timeout=spec.start_timeout_s
        )
    return sorted(str(ws.name) for ws in dask_scheduler.workers.values())


#: Nannies added in this process (the daemon), kept so they are not collected.
_ADDED: list[Any] = []


def _index(name: str) -> tuple[int, str]:
    match = _CPU_NAME.fullmatch(name)
    return (int(match.group(1)) if match else -1, name)
