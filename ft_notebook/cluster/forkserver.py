"""Worker processes forked from a server that has imported torch already.

A nanny starts its worker process the way ``distributed.worker.multiprocessing-method``
says. Dask's default, ``spawn``, starts a new interpreter that imports Dask, torch and
our preload again: about 2 s on an idle 2-core machine and 6 s or more under load, the
time a killed worker's replacement is missing from training and serving (issue 37).
With ``forkserver``, Python starts one server process once, which imports the modules
named here; every worker is then a ``fork`` of that server, ready in about 0.1 s.

Safe because the server is a fresh interpreter that only imports: it never
initialises CUDA (importing torch does not), opens no GPU and no socket, and starts no
thread a fork would lose. Each worker still applies its own environment after the
fork (``CUDA_VISIBLE_DEVICES``, ``OMP_NUM_THREADS`` through the preload), as Dask's
nanny does for ``spawn``. The server exits with the process that started it, and the
workers with their nanny, as before.

What it costs: one more process, holding what it imported; the workers share those
pages with it until they write to them, so the cluster as a whole holds less than with
``spawn`` (3 workers after a torch task: 523 MiB proportional set size in all, against
639 MiB).

``ft.cluster()`` starts its workers this way (``ft-notebook.cluster.worker-start``).
On a cluster you start yourself, name this module as a nanny preload::

    dask worker tls://... --nworkers 4 --preload-nanny ft_notebook.cluster.forkserver
    LocalCluster(n_workers=4, preload_nanny=["ft_notebook.cluster.forkserver"])

It switches the nanny's process to ``forkserver`` for good (a LocalCluster's nannies
live in your own process: every nanny it starts later forks too). A forked worker
sees the environment the server started with, plus the nanny's ``env``; a variable
set in that process later reaches no worker unless it is in the nanny's ``env``
(with ``spawn``, each new worker inherits the process's environment of the moment).
"""

from __future__ import annotations

#: What the server imports before it forks: Dask's worker, torch and the lazy imports a
#: rank makes (the seconds: :mod:`._preload_restart`), and our preload module (health
#: and thread settings, run again in each worker). Never a user's module: it could
#: initialise CUDA, which a fork must not inherit.
SERVER_IMPORTS = (
    "distributed",
    "distributed.nanny",
    "torch",
    "ft_notebook.cluster._preload",
    "ft_notebook.cluster._preload_restart",
)


def dask_config(worker_start: str) -> dict[str, str]:
    """The Dask setting that makes this process's nannies start workers this way."""
    return {"distributed.worker.multiprocessing-method": worker_start}


def preload_server(worker_start: str) -> None:
    """Name the server's imports; call in the process that runs the nannies, under
    :func:`dask_config`'s setting, before the first worker starts (the server starts
    with it)."""
    if worker_start != "forkserver":
        return
    from distributed.utils import get_mp_context

    # Dask names its own list on first use; ours replaces it, with its modules in it
    get_mp_context().set_forkserver_preload(list(SERVER_IMPORTS))


def dask_setup(nanny: object) -> None:
    """As a nanny preload (``--preload-nanny``): this process's nannies fork their
    workers from a server with torch imported, from the first worker on."""
    import dask.config

    dask.config.set(dask_config("forkserver"))  # for this process: what nannies read
    preload_server("forkserver")
