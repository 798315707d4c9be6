"""What the REST API knows, gathered without a server: the manager the handlers wrap.

:class:`ResilienceManager` reads the user's cluster registry, the event journals and
the snapshot store, and signals workers for chaos drills. It only reads, except for
:meth:`~ResilienceManager.chaos`, which is refused unless the configuration turned it
on. Names that arrive from a request (a topic, a notebook key, a cluster, a worker)
pass :func:`~ft_notebook._paths.checked_name` before they touch a path or a cluster.

Errors are :class:`ApiError`\\ s that carry their HTTP status, so the handlers stay
thin and this module testable::

    FTError
     └── ApiError (status)
          ├── BadRequest   400  a malformed name, topic, number or action; an input the
          │                     model rejects, or one that lost two replicas (poison)
          ├── Refused      403  chaos actions while they are turned off
          ├── NotFound     404  no such cluster, worker or service
          ├── TooMany      429  a service's queue is full (Overloaded)
          ├── Unavailable  503  the cluster does not answer, or no replica can
          └── TooLate      504  no replica answered within the deadline
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ft_notebook._journal import journal_path
from ft_notebook._paths import checked_name, data_dir
from ft_notebook.cluster import WorkerStatus
from ft_notebook.events import TOPIC_PREFIX, cluster_topic, history, run_topic
from ft_notebook.exceptions import ClusterError, ClusterUnreachable, FTError, UnsafeName
from ft_notebook.server._clients import Clients
from ft_notebook.server._models import (
    ChaosResultModel,
    ClusterModel,
    PredictionModel,
    RunHistoryModel,
    RunModel,
    ServiceHistoryModel,
    ServiceModel,
    SnapshotModel,
)
from ft_notebook.server._runs import RunJournals
from ft_notebook.server._services import Routers

if TYPE_CHECKING:
    from ft_notebook.cluster import ClusterInfo

#: Opens a Dask client to a registered cluster; the manager keeps it (see ._clients).
Connect = Callable[["ClusterInfo"], Any]

#: The most events one ``events`` call returns; a client pages on with ``since``.
MAX_EVENTS = 1000
CHAOS_ACTIONS = ("kill", "hang", "resume")
CHAOS_CONFIG_KEY = "ft-notebook.server.chaos-actions"


class ApiError(FTError):
    """A request the API cannot serve; ``status`` is its HTTP status code."""

    status: ClassVar[int] = 500


class BadRequest(ApiError):
    status = 400


class Refused(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class TooMany(ApiError):
    status = 429


class Unavailable(ApiError):
    status = 503


class TooLate(ApiError):
    status = 504


class ResilienceManager:
    """Clusters, runs, events and snapshots of the user who runs the Jupyter server.

    Args:
        chaos_actions: whether :meth:`chaos` may signal workers (config
            ``ft-notebook.server.chaos-actions``, read once where the server starts).
        connect: how to open a client to a registered cluster; by default
            :func:`ft_notebook.cluster.connect` with the cluster's certificate.
    """

    def __init__(self, *, chaos_actions: bool = False, connect: Connect | None = None) -> None:
        self.chaos_actions = chaos_actions
        self._clients = Clients(connect or _connect)
        self._runs = RunJournals()
        self._routers = Routers()

    def close(self) -> None:
        """Stop routing for services and close the clients kept to the user's clusters."""
        self._routers.close()
        self._clients.close()

    def clusters(self) -> list[ClusterModel]:
        """The user's running clusters, from the registry (dead entries are pruned)."""
        from ft_notebook.cluster import clusters

        running = clusters()
        self._clients.keep_only(info.name for info in running)
        return [
            ClusterModel(
                name=info.name,
                address=info.address,
                pid=info.pid,
                started=info.started,
                gpus=info.gpus,
                workers=dict(info.workers),
                dashboard=info.dashboard,
            )
            for info in running
        ]

    def workers(self, cluster: object) -> list[WorkerStatus]:
        """The workers of ``cluster`` and their health, asked of its scheduler."""
        from ft_notebook.cluster import status
        from ft_notebook.config import get_config

        with self._client(cluster) as client:
            # a kept client to a hung scheduler would otherwise wait for ever (503)
            return status(client, timeout=get_config().cluster.connect_timeout_s)

    def runs(self) -> list[RunModel]:
        """Every run that has a journal, with its state, health, progress, newest
        checkpoint and recoveries (see :mod:`._runs`); a run whose cluster is gone
        says so."""
        from ft_notebook.cluster import clusters

        running = {info.name: info.address for info in clusters()}
        return self._runs.runs(self._journal_dir(), running)

    def run_history(self, run: object) -> RunHistoryModel:
        """Run ``run`` as :meth:`runs` shows it, with why it is in its state and its
        progress over time (404 when it has no journal)."""
        from ft_notebook.cluster import clusters

        name = _name(run, "run name")
        running = {info.name: info.address for info in clusters()}
        found = self._runs.history(self._journal_dir(), name, running)
        if found is None:
            raise NotFound(f"No run named {name!r} has a journal; see GET runs for those that do.")
        return found

    def service_history(self, cluster: object, service: object) -> ServiceHistoryModel:
        """Service ``service`` of ``cluster`` as :meth:`services` shows it, with its tier
        and the traffic this server routed over time (404 when it does not run)."""
        name, service_name = _name(cluster, "cluster name"), _name(service, "service name")
        with self._client(name) as client:
            found = self._routers.history(client, name, service_name)
        if found is None:
            raise NotFound(f"No service named {service_name!r} runs on cluster {name!r}.")
        return found

    def events(self, topic: str, since: str | int = 0, limit: str | int = MAX_EVENTS) -> list[Any]:
        """Events of ``topic`` after sequence number ``since``, oldest first, at most
        ``limit`` of them (and never more than :data:`MAX_EVENTS`)."""
        topic = _name(topic, "event topic")
        if not topic.startswith(f"{TOPIC_PREFIX}."):
            raise BadRequest(
                f"The topic {topic!r} is not an ft_notebook topic: topics start with "
                f"{TOPIC_PREFIX + '.'!r}, for example {cluster_topic()!r} or "
                f"{run_topic('NAME')!r}."
            )
        after = _count(since, "since")
        most = min(_count(limit, "limit"), MAX_EVENTS)
        return [e.to_dict() for e in history(topic, since=after)[:most]]

    def snapshots(self, notebook: str) -> list[SnapshotModel]:
        """The snapshots of the notebook with key ``notebook``, oldest first; with none
        of its own, those it had under the name it was renamed from."""
        key = _name(notebook, "notebook key")
        from ft_notebook import _renames
        from ft_notebook.store import CheckpointStore

        rows, source = [], ""
        folder = data_dir()
        with CheckpointStore(folder / "snapshots", keep=None, publish_events=False) as store:
            infos = store.list(key)
            for earlier in [] if infos else _renames.renamed_from(folder, key):
                infos, source = store.list(earlier), earlier
                if infos:
                    break
        for info in infos:
            meta = info.metadata
            rows.append(
                SnapshotModel(
                    name=str(meta.get("name", "?")),
                    step=info.step,
                    time=info.time,
                    cell=int(meta.get("cell", 0)),
                    size=int(meta.get("size", 0)),
                    variables=tuple(str(v) for v in meta.get("variables", ())),
                    pinned=info.pinned,
                    renamed_from=source,
                )
            )
        return rows

    def services(self, cluster: object) -> list[ServiceModel]:
        """The services of ``cluster`` (asked of its scheduler) with their replicas, from
        their events (see ._services)."""
        name = _name(cluster, "cluster name")
        with self._client(name) as client:
            return self._routers.services(client, name)

    def predict(self, cluster: object, service: object, body: object) -> PredictionModel:
        """Answer ``body`` (``{"inputs": nested numbers}`` or ``{"json": value}``) with
        the service, routed from this server as a notebook routes it."""
        from ft_notebook.exceptions import (
            DeadlineExceeded,
            InputRejected,
            Overloaded,
            PoisonRequest,
            ServeError,
            ServiceUnavailable,
        )

        name, service_name = _name(cluster, "cluster name"), _name(service, "service name")
        with self._client(name) as client:
            try:
                return self._routers.predict(client, name, service_name, body)
            except (InputRejected, PoisonRequest, ValueError) as e:
                raise BadRequest(str(e)) from e
            except Overloaded as e:
                raise TooMany(str(e)) from e
            except ServiceUnavailable as e:
                raise Unavailable(str(e)) from e
            except DeadlineExceeded as e:
                raise TooLate(str(e)) from e
            except ServeError as e:  # no such service
                raise NotFound(str(e)) from e

    def chaos(self, cluster: object, action: object, worker: object) -> ChaosResultModel:
        """Kill, hang or resume ``worker`` of ``cluster``, if chaos actions are on."""
        if not self.chaos_actions:
            raise Refused(
                f"Chaos actions are turned off on this server. To allow killing and "
                f"hanging workers from JupyterLab, set {CHAOS_CONFIG_KEY}: true in your "
                f"Dask config and restart the Jupyter server."
            )
        if action not in CHAOS_ACTIONS:
            raise BadRequest(f"The chaos action {action!r} is unknown; use one of {CHAOS_ACTIONS}.")
        target = _name(worker, "worker name")
        from ft_notebook.cluster import chaos

        do: Callable[[Any, str], chaos.ChaosAction] = {
            "kill": chaos.kill_worker,
            "hang": chaos.hang_worker,
            "resume": chaos.resume_worker,
        }[str(action)]
        with self._client(cluster) as client:
            try:
                done = do(client, target)
            except ClusterUnreachable:
                raise
            except ClusterError as e:  # no such worker, or none at all
                raise NotFound(str(e)) from e
        return ChaosResultModel(
            str(cluster), str(action), done.signal, done.worker, done.address, done.pid
        )

    @contextlib.contextmanager
    def _client(self, cluster: object) -> Iterator[Any]:
        """A client to the registered cluster named ``cluster``, kept for the next
        call unless it fails (see :mod:`._clients`)."""
        from ft_notebook.cluster import clusters

        name = _name(cluster, "cluster name")
        running = clusters()
        self._clients.keep_only(c.name for c in running)
        info = next((c for c in running if c.name == name), None)
        if info is None:
            names = sorted(c.name for c in running)
            raise NotFound(f"No cluster named {name!r} is running; running clusters: {names}.")
        try:
            client = self._clients.get(info)
        except ClusterUnreachable as e:
            raise Unavailable(str(e)) from e
        try:
            yield client
        except (OSError, TimeoutError, ClusterUnreachable) as e:
            self._clients.drop(name, client)
            raise Unavailable(
                f"Cluster {name!r} at {info.address} stopped answering: {e}. See its "
                f"log {info.log}."
            ) from e

    def _journal_dir(self) -> Path:
        return journal_path(cluster_topic()).parent


def _connect(info: ClusterInfo) -> Any:
    from ft_notebook.cluster import connect

    return connect(info, set_as_default=False)


def _name(value: object, what: str) -> str:
    try:
        return checked_name(value, what)
    except UnsafeName as e:
        raise BadRequest(str(e)) from e


def _count(value: str | int, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if number < 0:
        raise BadRequest(f"{what} must be a whole number >= 0, got {value!r}.")
    return number
