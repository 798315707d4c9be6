"""ft_notebook: fault tolerance for training and serving from Jupyter notebooks.

Importing the package is cheap: torch, Dask and distributed load on first use of a
feature that needs them, and so do the events (``%load_ext ft_notebook`` followed by
``%ft restore`` in a fresh kernel must beat re-running a small notebook).
"""

from __future__ import annotations

import typing

# `cluster` and `serve` the functions shadow the subpackages of those names on this
# module: inside the package, import from them (`from ft_notebook.serve import x`).
from ft_notebook.cluster import cluster, clusters, down
from ft_notebook.exceptions import (
    AggregationError,
    CheckpointCorrupt,
    CheckpointExists,
    CheckpointNotFound,
    ClusterError,
    ClusterUnreachable,
    ConfigError,
    DeadlineExceeded,
    EventError,
    FTError,
    InputRejected,
    NoWorkers,
    Overloaded,
    PlanError,
    PoisonRequest,
    RendezvousTimeout,
    RequestTooLarge,
    RunFailed,
    ServeError,
    ServiceClosed,
    ServiceUnavailable,
    SnapshotError,
    StoreError,
    StoreUnsafe,
    TrainingError,
    UnsafeName,
)
from ft_notebook.serve import Service, serve, service, services

if typing.TYPE_CHECKING:
    from ft_notebook.events import Event, Health, RunState, history, publish, subscribe
    from ft_notebook.serve import Answer
    from ft_notebook.store import CheckpointStore
    from ft_notebook.train import Run, fit, runs
    from ft_notebook.widgets import dashboard

__version__ = "0.1.0"

__all__ = [
    "AggregationError",
    "Answer",
    "CheckpointCorrupt",
    "CheckpointExists",
    "CheckpointNotFound",
    "CheckpointStore",
    "ClusterError",
    "ClusterUnreachable",
    "ConfigError",
    "DeadlineExceeded",
    "Event",
    "EventError",
    "FTError",
    "Health",
    "InputRejected",
    "NoWorkers",
    "Overloaded",
    "PlanError",
    "PoisonRequest",
    "RendezvousTimeout",
    "RequestTooLarge",
    "Run",
    "RunFailed",
    "RunState",
    "ServeError",
    "Service",
    "ServiceClosed",
    "ServiceUnavailable",
    "SnapshotError",
    "StoreError",
    "StoreUnsafe",
    "TrainingError",
    "UnsafeName",
    "__version__",
    "attach",
    "cluster",
    "clusters",
    "dashboard",
    "down",
    "fit",
    "history",
    "load_ipython_extension",
    "publish",
    "runs",
    "serve",
    "service",
    "services",
    "subscribe",
    "unload_ipython_extension",
]


def load_ipython_extension(shell: object) -> None:
    """``%load_ext ft_notebook``: register the ``%ft`` magics in this kernel."""
    from ft_notebook.magics import load_ipython_extension as load

    load(shell)


def unload_ipython_extension(shell: object) -> None:
    from ft_notebook.magics import unload_ipython_extension as unload

    unload(shell)


def attach(target: typing.Any, **kwargs: typing.Any) -> typing.Any:
    """Find a run, or connect to a cluster, again.

    A run name gives its :class:`Run` (on your default cluster, or ``cluster=``). A
    ``Client``, a scheduler address or file, or the name of one of your clusters gives
    a Client with ft_notebook's plugins installed (see
    :func:`ft_notebook.cluster.attach`).
    """
    from ft_notebook.cluster import attach as attach_cluster
    from ft_notebook.cluster import clusters as your_clusters

    is_name = isinstance(target, str) and "://" not in target and ":" not in target
    if is_name and "/" not in target and target not in {c.name for c in your_clusters()}:
        from ft_notebook.train import attach as attach_run

        return attach_run(target, cluster=kwargs.get("cluster"))
    return attach_cluster(target, **kwargs)


_FROM_EVENTS = frozenset({"Event", "Health", "RunState", "history", "publish", "subscribe"})


def __getattr__(name: str) -> object:
    # The store and training load numpy and fsspec, the events a dozen dataclasses:
    # on first use, not on import.
    if name in _FROM_EVENTS:
        import ft_notebook.events as events

        return getattr(events, name)
    if name == "CheckpointStore":
        from ft_notebook.store import CheckpointStore

        return CheckpointStore
    if name == "dashboard":
        from ft_notebook.widgets import dashboard

        return dashboard
    if name == "Answer":
        from ft_notebook.serve import Answer

        return Answer
    if name in ("Run", "fit", "runs"):
        import ft_notebook.train as train

        return getattr(train, name)
    raise AttributeError(f"module 'ft_notebook' has no attribute {name!r}")


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The Jupyter server extension of this package: the REST API of the JupyterLab panel."""
    return [{"module": "ft_notebook.server"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where JupyterLab finds the prebuilt front-end extension of this package."""
    return [{"src": "labextension", "dest": "ft-notebook-labextension"}]
