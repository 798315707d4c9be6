"""Start, scale and stop the user's private clusters from JupyterLab; a kernel's memory.

:class:`ClusterControls` is what the panel's cluster buttons reach: it checks each
request (a name fit to be a path component, a small whole number of workers) before
anything touches the registry, then calls the cluster layer's own ``cluster()``,
``scale()`` and ``down()``, the calls a notebook or ``ft-notebook cluster`` makes.
One action per cluster name runs at a time: a second one meanwhile is a 409, not a
second daemon. The handlers run these blocking calls in a thread (a start takes
seconds), never on the server's event loop.

:func:`kernel_usage` reads the resident memory of one of this server's kernels from
its process, which the server's kernel manager knows (the kernel's provisioner).

Errors are the manager's :class:`~._manager.ApiError`\\ s (400, 404, 409, 500), each
saying what was asked, what was found and what to do instead.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ft_notebook.exceptions import ClusterError
from ft_notebook.server._manager import ApiError, BadRequest, NotFound, _name
from ft_notebook.server._models import ClusterModel, ClusterStoppedModel, KernelUsageModel

#: The most workers a cluster gets from the panel: twice this machine's cores.
MAX_PANEL_WORKERS = 2 * (os.cpu_count() or 1)


class Conflict(ApiError):
    status = 409


class ActionFailed(ApiError):
    status = 500


class ClusterControls:
    """Start, scale and stop the user's clusters (the cluster layer does the work).

    Args:
        clusters: the running clusters as the API shows them (``ResilienceManager.
            clusters``), read after each action for the answer.
    """

    def __init__(self, clusters: Callable[[], list[ClusterModel]]) -> None:
        self._clusters = clusters
        self._lock = threading.Lock()
        self._busy: dict[str, str] = {}  # cluster name -> the action under way

    def start(self, body: object) -> ClusterModel:
        """``{"name": NAME (default "default"), "workers": N}``: start the cluster;
        409 if it already runs."""
        fields = _object(body, '{"name": "default", "workers": 2}')
        name = _name(fields.get("name", "default"), "cluster name")
        workers = _workers(fields.get("workers"))
        with self._acting(name, "start"):
            running = self._find(name)
            if running is not None:
                raise Conflict(
                    f"Cluster {name!r} is already running with {len(running.workers)} "
                    f"worker(s): scale it (POST clusters/{name}/scale) or stop it first."
                )
            from ft_notebook.cluster import cluster

            try:
                client = cluster(name=name, workers=workers, set_as_default=False)
            except ClusterError as e:
                raise ActionFailed(f"Cluster {name!r} did not start: {e}") from e
            client.close()
            return self._shown(name)

    def scale(self, name: object, body: object) -> ClusterModel:
        """``{"workers": N}``: grow or shrink the running cluster ``name`` in place."""
        cluster_name = _name(name, "cluster name")
        workers = _workers(_object(body, '{"workers": 3}').get("workers"))
        with self._acting(cluster_name, "scale"):
            running = self._find(cluster_name)
            if running is None:
                raise self._not_running(cluster_name)
            if running.gpus:
                raise Conflict(
                    f"Cluster {cluster_name!r} runs one worker per GPU "
                    f"({list(running.gpus)}), so it does not scale: stop it and start it "
                    f"with other GPUs instead."
                )
            from ft_notebook.cluster import scale

            try:
                scale(cluster_name, workers)
            except ClusterError as e:
                raise ActionFailed(str(e)) from e
            return self._shown(cluster_name)

    def stop(self, name: object) -> ClusterStoppedModel:
        """Stop the cluster ``name``: its daemon and workers have exited on return."""
        cluster_name = _name(name, "cluster name")
        with self._acting(cluster_name, "stop"):
            running = self._find(cluster_name)
            if running is None:
                raise self._not_running(cluster_name)
            from ft_notebook.cluster import down

            if not down(cluster_name):  # it stopped by itself meanwhile (idle)
                raise self._not_running(cluster_name)
            return ClusterStoppedModel(
                cluster_name, (running.pid, *sorted(running.workers.values()))
            )

    @contextlib.contextmanager
    def _acting(self, name: str, action: str) -> Iterator[None]:
        with self._lock:
            under_way = self._busy.get(name)
            if under_way is not None:
                raise Conflict(
                    f"A {under_way} of cluster {name!r} is under way; wait for it to "
                    f"finish, then try the {action} again."
                )
            self._busy[name] = action
        try:
            yield
        finally:
            with self._lock:
                del self._busy[name]

    def _find(self, name: str) -> ClusterModel | None:
        return next((c for c in self._clusters() if c.name == name), None)

    def _shown(self, name: str) -> ClusterModel:
        found = self._find(name)
        if found is None:
            raise ActionFailed(f"Cluster {name!r} stopped right after it was changed; see its log.")
        return found

    def _not_running(self, name: str) -> NotFound:
        names = sorted(c.name for c in self._clusters())
        return NotFound(
            f"No cluster named {name!r} is running; running clusters: {names}. Start it "
            f"with POST clusters {{'name': {name!r}, 'workers': N}}."
        )


def kernel_usage(kernel_manager: Any, kernel_id: object) -> KernelUsageModel:
    """The resident memory of this server's kernel ``kernel_id`` (404: not one of
    this server's kernels, or its process is gone)."""
    import psutil

    # the id is only compared with the kernel manager's; it never becomes a path
    if kernel_id not in kernel_manager.list_kernel_ids():
        raise NotFound(
            f"This server runs no kernel {kernel_id!r}; it may have been shut down "
            f"(GET api/kernels lists the running ones)."
        )
    kernel = kernel_manager.get_kernel(kernel_id)
    provisioner = getattr(kernel, "provisioner", None)
    pid = getattr(provisioner, "pid", None)
    if not isinstance(pid, int):
        raise NotFound(
            f"Kernel {kernel_id!r} has no local process this server can read (its "
            f"provisioner is {type(provisioner).__name__})."
        )
    try:
        rss = psutil.Process(pid).memory_info().rss
    except psutil.NoSuchProcess:
        raise NotFound(
            f"The process {pid} of kernel {kernel_id!r} is gone; restart the kernel."
        ) from None
    return KernelUsageModel(kernel_id=str(kernel_id), pid=pid, rss=int(rss))


def _object(body: object, example: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest(f"The body must be a JSON object such as {example}; got {body!r}.")
    return body


def _workers(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PANEL_WORKERS:
        raise BadRequest(
            f"workers must be a whole number from 1 to {MAX_PANEL_WORKERS} (twice this "
            f"machine's cores); got {value!r}."
        )
    return value
