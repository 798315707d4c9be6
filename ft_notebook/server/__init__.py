"""The Jupyter server extension: ft_notebook's REST API for the JupyterLab panel.

Routes, under ``<base_url>/ft-notebook/api/`` (see :data:`ROUTES`):

- ``GET clusters``: the user's running clusters, from the registry;
- ``POST clusters`` ``{"name", "workers"}`` (201), ``POST clusters/NAME/scale``
  ``{"workers"}``, ``POST clusters/NAME/stop``: start, scale in place and stop the
  user's private cluster, as ``ft.cluster()``, ``ft_notebook.cluster.scale()`` and
  ``ft.down()`` do (409 while another action on it is under way; see :mod:`._cluster_controls`);
- ``GET kernels/KERNEL_ID/usage``: the resident memory of one of this server's kernels;
- ``GET workers?cluster=NAME``: that cluster's workers and their health, asked of its
  scheduler (503 when it does not answer);
- ``GET runs``: runs seen in the event journals, with their newest state;
- ``GET runs/RUN/history``: that run, why it is in its state, and its progress over
  time (step, loss, samples/s; bounded, the whole run);
- ``GET events?topic=T&since=N&limit=M``: a topic's events after ``N``, oldest first;
- ``GET snapshots?notebook=KEY`` or ``?path=API_PATH``: the snapshots of one notebook,
  by its snapshot key or by the path of the open notebook (the key its kernel uses);
- ``GET services?cluster=NAME``: that cluster's services and their replicas;
- ``GET services/SERVICE/history?cluster=NAME``: that service, its tier over time and
  the traffic this server routed to it;
- ``POST services/SERVICE/predict?cluster=NAME``: answer a JSON body with the service,
  routed as a notebook routes it (400 rejected input, 429 overloaded, 503 no replica
  and no fallback, 504 past the deadline); never unpickles anything from the request;
- ``POST chaos`` ``{"cluster", "action": "kill"|"hang"|"resume", "worker"}``:
  refused (403) unless ``ft-notebook.server.chaos-actions`` is true.

Every route is authenticated and authorised (resource ``ft_notebook``); every
mutation is a POST, which carries XSRF protection when authenticated by cookie. Errors
are JSON ``{"message", "reason"}`` with 400, 403, 404, 409 or 503. The extension reads
journals, the registry and the store, records the renames of notebooks that have
snapshots (see :mod:`._renames`), starts, scales and stops the user's own clusters
when asked; it routes service requests through the serving
layer's router and never imports the session or training layers.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.utils import url_path_join

from ft_notebook.server._cluster_controls import ClusterControls
from ft_notebook.server._handlers import (
    AUTH_RESOURCE,
    ChaosHandler,
    ClusterScaleHandler,
    ClustersHandler,
    ClusterStopHandler,
    EventsHandler,
    KernelUsageHandler,
    PredictHandler,
    RunsHandler,
    ServicesHandler,
    SnapshotsHandler,
    WorkersHandler,
)
from ft_notebook.server._history import RunHistoryHandler, ServiceHistoryHandler
from ft_notebook.server._manager import ResilienceManager
from ft_notebook.server._renames import CONTENTS_EVENTS, listener

__all__ = ["API_PREFIX", "AUTH_RESOURCE", "ROUTES", "ResilienceManager"]

API_PREFIX = "ft-notebook/api"

#: (path under the server's base URL, handler class, HTTP methods it serves).
ROUTES: tuple[tuple[str, type[Any], tuple[str, ...]], ...] = (
    (f"{API_PREFIX}/clusters", ClustersHandler, ("GET", "POST")),
    (f"{API_PREFIX}/clusters/([^/]+)/scale", ClusterScaleHandler, ("POST",)),
    (f"{API_PREFIX}/clusters/([^/]+)/stop", ClusterStopHandler, ("POST",)),
    (f"{API_PREFIX}/kernels/([^/]+)/usage", KernelUsageHandler, ("GET",)),
    (f"{API_PREFIX}/workers", WorkersHandler, ("GET",)),
    (f"{API_PREFIX}/runs", RunsHandler, ("GET",)),
    (f"{API_PREFIX}/runs/([^/]+)/history", RunHistoryHandler, ("GET",)),
    (f"{API_PREFIX}/events", EventsHandler, ("GET",)),
    (f"{API_PREFIX}/snapshots", SnapshotsHandler, ("GET",)),
    (f"{API_PREFIX}/services", ServicesHandler, ("GET",)),
    (f"{API_PREFIX}/services/([^/]+)/history", ServiceHistoryHandler, ("GET",)),
    (f"{API_PREFIX}/services/([^/]+)/predict", PredictHandler, ("POST",)),
    (f"{API_PREFIX}/chaos", ChaosHandler, ("POST",)),
)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "ft_notebook.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Register the routes; the chaos setting is read once, here."""
    from ft_notebook.config import reload_config

    manager = ResilienceManager(chaos_actions=reload_config().server.chaos_actions)
    web_app = serverapp.web_app
    base_url = web_app.settings["base_url"]
    web_app.settings["ft_notebook_manager"] = manager
    web_app.settings["ft_notebook_controls"] = ClusterControls(manager.clusters)
    web_app.add_handlers(
        ".*$", [(url_path_join(base_url, path), handler) for path, handler, _ in ROUTES]
    )
    # a renamed notebook keeps its snapshots: Jupyter says what was renamed
    serverapp.event_logger.add_listener(schema_id=CONTENTS_EVENTS, listener=listener(serverapp))
    serverapp.log.info("ft_notebook server extension: %d routes under /%s", len(ROUTES), API_PREFIX)
