"""ft_notebook: fault tolerance for training and serving from Jupyter notebooks.

Importing the package is cheap: torch, Dask and distributed load on first use of a
feature that needs them.
"""

from __future__ import annotations

import typing

# `cluster` the function shadows the subpackage of that name on this module: inside
# the package, import from ft_notebook.cluster (`from ft_notebook.cluster import x`).
from ft_notebook.cluster import attach, cluster, clusters, down
from ft_notebook.events import Event, Health, RunState, history, publish, subscribe
from ft_notebook.exceptions import (
    CheckpointCorrupt,
    CheckpointNotFound,
    ClusterError,
    ClusterUnreachable,
    ConfigError,
    EventError,
    FTError,
    NoWorkers,
    RendezvousTimeout,
    RunFailed,
    SnapshotError,
    StoreError,
    StoreUnsafe,
    TrainingError,
    UnsafeName,
)

if typing.TYPE_CHECKING:
    from ft_notebook.store import CheckpointStore

__version__ = "0.1.0"

__all__ = [
    "CheckpointCorrupt",
    "CheckpointNotFound",
    "CheckpointStore",
    "ClusterError",
    "ClusterUnreachable",
    "ConfigError",
    "Event",
    "EventError",
    "FTError",
    "Health",
    "NoWorkers",
    "RendezvousTimeout",
    "RunFailed",
    "RunState",
    "SnapshotError",
    "StoreError",
    "StoreUnsafe",
    "TrainingError",
    "UnsafeName",
    "__version__",
    "attach",
    "cluster",
    "clusters",
    "down",
    "history",
    "load_ipython_extension",
    "publish",
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


def __getattr__(name: str) -> object:
    # The store loads numpy and fsspec: on first use, not on `import ft_notebook`.
    if name == "CheckpointStore":
        from ft_notebook.store import CheckpointStore

        return CheckpointStore
    raise AttributeError(f"module 'ft_notebook' has no attribute {name!r}")


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The Jupyter server extension of this package: the REST API of the JupyterLab panel."""
    return [{"module": "ft_notebook.server"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where JupyterLab finds the prebuilt front-end extension of this package."""
    return [{"src": "labextension", "dest": "ft-notebook-labextension"}]
