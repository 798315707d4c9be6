"""A private ft_notebook cluster for one test module, always shut down after it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def private_cluster(
    prefix: str = "t", workers: int = 2, *, dashboard: bool = False
) -> Iterator[Any]:
    """Start a detached private cluster under a fresh name; yield a Client to it; then
    close the client and stop the cluster, whatever happened in between. ``dashboard``:
    with Dask's dashboard (on a free port), which is off by default."""
    import dask.config

    from ft_notebook.cluster import cluster, down
    from ft_notebook.config import reload_config

    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client = None
    try:
        port = {"ft-notebook.cluster.dashboard-port": 0} if dashboard else {}
        with dask.config.set(port):
            reload_config()
            client = cluster(name=name, workers=workers, set_as_default=False)
        reload_config()
        yield client
    finally:
        if client is not None:
            client.close()
        down(name)


@contextlib.contextmanager
def training_cluster(
    workers: int = 3,
    heartbeat: str = "200ms",
    env: dict[str, str] | None = None,
    silence_logs: int = 40,
    worker_start: str = "forkserver",
) -> Iterator[Any]:
    """A LocalCluster for training drills; yield a Client to it with our plugins on.

    Worker processes under nannies (a killed one comes back under its name), one
    thread each, torch imported before they register (as in ``ft.cluster()``: an
    import in a running worker can starve its heartbeats into an eviction), and
    Dask's ``lost-worker-timeout`` raised: by default a LocalCluster closes, for good,
    the nanny of a worker still gone 15 s after a removal, and that check can land
    while a later kill of the same worker is restarting.

    ``worker_start``: "forkserver" (forks of a server with torch imported, as
    ``ft.cluster()`` starts them, so a killed worker is back within about 0.1 s; see
    :mod:`ft_notebook.cluster.forkserver`) or "spawn" (Dask's default: a new
    interpreter per worker, which imports torch again, 2 s or more). The setting holds
    while the cluster lives, for its restarts; the server, once started, stays for the
    rest of this process. A script that starts one needs the ``if __name__ ==
    "__main__":`` guard.
    """
    import dask.config
    from distributed import Client, LocalCluster

    from ft_notebook.cluster import forkserver, install_plugins
    from ft_notebook.config import cluster_dask_config

    held = {"distributed.deploy.lost-worker-timeout": "1h", **forkserver.dask_config(worker_start)}
    with dask.config.set(held):
        forkserver.preload_server(worker_start)
        with dask.config.set(cluster_dask_config()):
            lc = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                worker_dashboard_address=None,
                heartbeat_interval=heartbeat,
                silence_logs=silence_logs,
                env=env or {},
                preload=["ft_notebook.cluster._preload"],
            )
        try:
            with Client(lc, set_as_default=False) as client:
                install_plugins(client)
                client.wait_for_workers(workers, timeout=120)
                yield client
        finally:
            lc.close()
