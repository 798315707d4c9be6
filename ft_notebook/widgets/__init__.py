"""Live dashboards in the notebook: replica health, degradation, recoveries.

``dashboard(run)`` (also ``Run.dashboard()`` and ``%ft dashboard RUN``) follows one
training run; ``dashboard()`` follows the cluster. Both are built from events only
(:mod:`._state` folds them, :mod:`._live` feeds them in the background, :mod:`._view`
shows them as ipywidgets with a bokeh chart), so they update while other cells run,
and rebuild from the journal in a new kernel. Without a widget front end they show
as HTML or text. ``Service.dashboard()`` (:mod:`._service`) shows a served model's
replicas, tier and latencies from the service's status.
"""

from __future__ import annotations

from typing import Any

from ft_notebook.events import cluster_topic, run_topic, session_topic
from ft_notebook.widgets._live import LiveDashboard
from ft_notebook.widgets._notebook import kernel_notebook
from ft_notebook.widgets._service import ServiceDashboard, ServiceState
from ft_notebook.widgets._state import DashboardState, Tile

__all__ = [
    "DashboardState",
    "LiveDashboard",
    "ServiceDashboard",
    "ServiceState",
    "Tile",
    "dashboard",
]


def dashboard(run: Any = None, *, client: Any = None, max_rate: float = 4.0) -> LiveDashboard:
    """A live dashboard of ``run`` (a Run or a run name), or of the cluster.

    ``client`` is the Dask client the events come through (by default the run's, or
    your default cluster's). Of the notebook snapshots it shows the newest of the
    notebook it is shown in, and none in a kernel without ``%load_ext ft_notebook``.
    """
    name = getattr(run, "name", run)
    client = client or getattr(run, "client", None)
    notebook = kernel_notebook()
    # without a notebook of its own no snapshot is its to show: no journal to replay
    snapshots = [session_topic()] if notebook else []
    if name is not None:
        return LiveDashboard(
            [run_topic(str(name)), *snapshots],
            run=str(name),
            title=f"run {name}",
            via=client,
            max_rate=max_rate,
            notebook=notebook,
        )
    from ft_notebook.cluster import cluster, status
    from ft_notebook.events import history

    client = client or cluster()
    # the cluster topic is shared by all of your clusters: its past is not this
    # cluster's; the tiles start from the workers there are now
    past = history(cluster_topic())
    live = LiveDashboard(
        [cluster_topic(), *snapshots],
        run=None,
        title="cluster",
        via=client,
        max_rate=max_rate,
        since={cluster_topic(): past[-1].seq if past else 0},
        notebook=notebook,
    )
    rows = status(client)  # not under the lock: events arrive on the client's loop meanwhile
    with live._lock:
        for row in rows:
            tile = live.state.tiles.setdefault(row.name, Tile(row.name))
            tile.state = str(row.state).upper()
            tile.heartbeat_age_s, tile.restarts = row.heartbeat_age_s, row.restarts
        live.state.version += 1
    live.flush()
    return live
