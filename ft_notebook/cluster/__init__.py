"""Private, secured Dask clusters per user, and the control plane on any cluster.

``cluster()`` returns a Client to the user's own cluster, starting it on first use:
detached from the caller (it outlives the kernel), TLS with certificates made for
it and kept in the user's 0700 data folder, on loopback unless configured otherwise,
one worker per allowed GPU or a core-fitting number of CPU workers, torch preloaded,
and an idle timeout. The registry (``clusters()``) is how a new process finds it.
``attach()`` connects to any Dask cluster and installs the same plugins; ``down()``
stops only clusters we started; ``scale()`` grows or shrinks a running CPU cluster in place.

Submodules: :mod:`~ft_notebook.cluster.plugins` (the SchedulerPlugin and WorkerPlugin
other features build on) and :mod:`~ft_notebook.cluster.chaos` (kill, hang, resume a
worker). Importing this package loads neither Dask nor torch.

Raises (from the calls): :class:`~ft_notebook.exceptions.ClusterError` and its
subclass :class:`~ft_notebook.exceptions.ClusterUnreachable`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ft_notebook.cluster._api import (
    attach,
    client_for,
    cluster,
    clusters,
    connect,
    down,
    hold,
    install_plugins,
    release,
    rendezvous_address,
)
from ft_notebook.cluster._scale import scale

if TYPE_CHECKING:
    from ft_notebook.cluster._registry import ClusterInfo
    from ft_notebook.cluster._status import WorkerStatus, format_table, status

__all__ = [
    "ClusterInfo",
    "WorkerStatus",
    "attach",
    "client_for",
    "cluster",
    "clusters",
    "connect",
    "down",
    "format_table",
    "hold",
    "install_plugins",
    "release",
    "rendezvous_address",
    "scale",
    "status",
]


def __getattr__(name: str) -> object:
    # `import ft_notebook` binds cluster(), clusters() and down() from here; the rest
    # loads on first use, so that a notebook restore does not pay for it
    if name == "ClusterInfo":
        from ft_notebook.cluster._registry import ClusterInfo

        return ClusterInfo
    if name in ("WorkerStatus", "format_table", "status"):
        from ft_notebook.cluster import _status

        return getattr(_status, name)
    raise AttributeError(f"module 'ft_notebook.cluster' has no attribute {name!r}")
