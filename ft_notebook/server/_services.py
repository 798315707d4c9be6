"""Services as the REST API sees them, and routing requests that arrive over HTTP.

Which services run comes from the cluster's coordinator; what is known of each (its
tier and why, its wanted count, its replicas) is its events folded into a
:class:`~ft_notebook.runfold.ServiceView`, the fold a notebook's service dashboard
reads too. Each service's events are folded once and then only the new ones.

The server keeps one :class:`~ft_notebook.serve.Service` handle per cluster and
service, so an HTTP request is routed exactly as a notebook's call is (its own router:
least outstanding, retries, hedging, fallback). Request bodies are JSON and only JSON:
``{"inputs": [[...], ...]}`` becomes a float32 tensor, ``{"json": value}`` reaches the
model as that value; nothing from a request is ever unpickled. Outputs go back as
JSON (tensors and arrays as nested lists).
"""

from __future__ import annotations

import threading
from typing import Any

from ft_notebook.events import Health, history, service_topic
from ft_notebook.runfold import ServiceView
from ft_notebook.serve._protocol import ServiceAction
from ft_notebook.server._models import PredictionModel, ReplicaModel, ServiceModel

#: The largest number of input values one HTTP request may carry.
MAX_VALUES = 1 << 22


class Routers:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handles: dict[tuple[str, str], tuple[Any, Any]] = {}  # -> (client, Service)
        self._views: dict[tuple[str, str], ServiceView] = {}  # (cluster, name) -> fold

    def services(self, client: Any, cluster: str) -> list[ServiceModel]:
        from ft_notebook.serve._service import install

        install(client)
        names = client.sync(client.scheduler.ft_service, action=ServiceAction.NAMES.value)
        rows = []
        for entry in names:
            view = self.view(client, cluster, str(entry["name"]))
            replicas = tuple(
                ReplicaModel(r.replica, r.worker, r.state, r.since, r.cause)
                for r in view.replica_rows()
            )
            rows.append(
                ServiceModel(
                    name=view.name,
                    cluster=cluster,
                    # before its first change of tier a service has no ready replica
                    health=view.health or Health.FALLBACK,
                    reason=view.reason or "no replica ready yet",
                    wanted=view.wanted or int(entry["wanted"]),
                    ready=view.ready,
                    replicas=replicas,
                )
            )
        return rows

    def view(self, client: Any, cluster: str, name: str) -> ServiceView:
        """Service ``name``'s events folded, reading only those after the last fold."""
        with self._lock:
            view = self._views.get((cluster, name)) or ServiceView(name)
        for event in history(service_topic(name), since=view.last_seq, via=client):
            view = view.apply(event)
        with self._lock:
            self._views[(cluster, name)] = view
        return view

    def predict(self, client: Any, cluster: str, name: str, body: object) -> PredictionModel:
        x = _inputs(body)
        answer = self._service(client, cluster, name).call(x)
        return PredictionModel(
            outputs=_json(answer.value),
            replica=answer.replica,
            tier=answer.tier,
            retries=answer.retries,
            hedged=answer.hedged,
            latency_s=answer.latency_s,
        )

    def _service(self, client: Any, cluster: str, name: str) -> Any:
        from ft_notebook.serve import service

        with self._lock:
            kept = self._handles.get((cluster, name))
            if kept is not None and kept[0] is client and not kept[1].router.closed:
                return kept[1]
            handle = service(name, cluster=client)
            if kept is not None:
                kept[1].detach()
            self._handles[(cluster, name)] = (client, handle)
            return handle

    def close(self) -> None:
        with self._lock:
            handles, self._handles = list(self._handles.values()), {}
        for _, handle in handles:
            try:
                handle.detach()
            except Exception:  # its cluster is gone already
                continue


def _inputs(body: object) -> Any:
    if not isinstance(body, dict) or len(body.keys() & {"inputs", "json"}) != 1:
        raise ValueError(
            'The body must be a JSON object with "inputs" (nested lists of numbers, '
            'sent as a float32 tensor) or "json" (any JSON value, sent as it is).'
        )
    if "json" in body:
        return body["json"]
    import torch

    values = body["inputs"]
    try:
        x = torch.tensor(values, dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError) as e:
        raise ValueError(f'"inputs" must be nested lists of numbers of one shape: {e}') from e
    if x.numel() > MAX_VALUES:
        raise ValueError(f'"inputs" has {x.numel()} values; at most {MAX_VALUES} per request.')
    return x


def _json(value: Any) -> Any:
    """A model's output as JSON values."""
    if hasattr(value, "tolist"):  # torch tensors, numpy arrays and scalars
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ValueError(f"The model answered a {type(value).__name__}, which has no JSON form.")
