"""Services as the REST API sees them, and routing requests that arrive over HTTP.

Which services run comes from the cluster's coordinator; what is known of each (its
tier and why, its wanted count, its replicas, every caller's traffic) is its events
folded into a :class:`~ft_notebook.runfold.ServiceView`, the fold a notebook's service
dashboard reads too. Each service's events are folded once and then only the new ones.

The server keeps one :class:`~ft_notebook.serve.Service` handle per cluster and
service, so an HTTP request is routed exactly as a notebook's call is (its own router:
least outstanding, retries, hedging, fallback; its traffic published as theirs is).
Request bodies are JSON and only JSON: ``{"inputs": [[...], ...]}`` becomes a float32
tensor, ``{"json": value}`` reaches the model as that value; nothing from a request is
ever unpickled. Outputs go back as JSON (tensors and arrays as nested lists; NaN and
infinities as ``null``, which JSON can carry).

A request's body is checked before it reaches a cluster (:func:`parse_body`,
:func:`check_request`): at most :data:`MAX_BODY_BYTES`, ``json`` values at most
:data:`MAX_JSON_BYTES`; numbers finite (``NaN``, ``Infinity`` and ``1e999`` are
refused, not fed to a model); nesting as deep as Python's recursion limit. The
parse's number hooks are Python code, so a parse in a thread lets the server's event
loop run between them (a plain ``json.loads`` holds the GIL to its end: an 81 MB
body kept the loop from running for 1.35 s, against at most 81 ms with the hooks).
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any

from ft_notebook.events import Health, history, service_topic
from ft_notebook.runfold import ServiceView
from ft_notebook.serve._protocol import ServiceAction
from ft_notebook.server._models import (
    PredictionModel,
    ReplicaModel,
    ServiceHistoryModel,
    ServiceModel,
    TierChangeModel,
    TrafficPointModel,
)

#: The largest number of input values one HTTP request may carry.
MAX_VALUES = 1 << 22
#: The largest request body (413 above it), and the largest one with a ``json`` value.
MAX_BODY_BYTES = 32 << 20
MAX_JSON_BYTES = 8 << 20


class TooLarge(ValueError):
    """A request body over a cap (an HTTP 413)."""


def parse_body(raw: bytes) -> object:
    """The JSON of a request body; ValueError (a 400) if it is not JSON, holds a
    number that is not finite, or nests deeper than a parser may recurse."""
    if len(raw) > MAX_BODY_BYTES:
        raise TooLarge(
            f"The body has {len(raw)} bytes; at most {MAX_BODY_BYTES} per request. Send "
            f"fewer inputs per request."
        )
    try:
        return json.loads(raw, parse_float=_finite, parse_int=_int, parse_constant=_constant)
    except RecursionError:
        raise ValueError(
            "The body nests arrays or objects too deeply to parse. Send inputs as nested "
            "lists as deep as the model's input has dimensions."
        ) from None
    except ValueError as e:
        raise ValueError(f"The body is not JSON the service can take: {e}.") from e


def check_request(body: object, size: int) -> None:
    """Refuse a body that is not ``{"inputs": ...}`` or ``{"json": ...}``, or a
    ``json`` value over its cap (``size``: the body's bytes), before any cluster is
    asked."""
    if not isinstance(body, dict) or len(body.keys() & {"inputs", "json"}) != 1:
        raise ValueError(
            'The body must be a JSON object with "inputs" (nested lists of numbers, '
            'sent as a float32 tensor) or "json" (any JSON value, sent as it is).'
        )
    if "json" in body and size > MAX_JSON_BYTES:
        raise TooLarge(
            f'The body has {size} bytes; a "json" value may have at most '
            f'{MAX_JSON_BYTES}. Send a smaller value, or tensors as "inputs".'
        )


def _all_finite(array: Any) -> bool:
    """Whether a tensor or array holds only finite numbers (False: look closer)."""
    try:
        if hasattr(array, "isfinite"):  # torch
            return bool(array.isfinite().all())
        import numpy as np

        return bool(np.isfinite(array).all())
    except (TypeError, RuntimeError):  # strings, objects: walked one by one
        return False


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is out of a float's range: send finite numbers")
    return value


def _int(text: str) -> int:
    return int(text)  # in Python, not int itself: the parser would call that without a pause


def _constant(text: str) -> float:
    raise ValueError(f"{text} is not a number a model can take: send finite numbers")


class Routers:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handles: dict[tuple[str, str], tuple[Any, Any]] = {}  # -> (client, Service)
        self._views: dict[tuple[str, str], ServiceView] = {}  # (cluster, name) -> fold

    def services(self, client: Any, cluster: str) -> list[ServiceModel]:
        return [
            _model(self.view(client, cluster, name), cluster, wanted)
            for name, wanted in self._names(client).items()
        ]

    def history(self, client: Any, cluster: str, name: str) -> ServiceHistoryModel | None:
        """Service ``name`` with its tier and its traffic over time, both its events
        folded (every caller's windows: notebooks', this server's); None if it does
        not run."""
        wanted = self._names(client).get(name)
        if wanted is None:
            return None
        view = self.view(client, cluster, name)
        tiers = tuple(TierChangeModel(t, tier, why) for t, tier, why in view.transitions)
        traffic = tuple(
            TrafficPointModel(p.time, p.requests_per_s, None if p.p99_s is None else p.p99_s * 1000)
            for p in view.traffic
        )
        return ServiceHistoryModel(_model(view, cluster, wanted), tiers, traffic)

    def _names(self, client: Any) -> dict[str, int]:
        """Name -> wanted replicas of every service the coordinator runs."""
        from ft_notebook.serve._service import install

        install(client)
        names = client.sync(client.scheduler.ft_service, action=ServiceAction.NAMES.value)
        return {str(entry["name"]): int(entry["wanted"]) for entry in names}

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


def _model(view: ServiceView, cluster: str, wanted: int) -> ServiceModel:
    replicas = tuple(
        ReplicaModel(r.replica, r.worker, r.state, r.since, r.cause) for r in view.replica_rows()
    )
    return ServiceModel(
        name=view.name,
        cluster=cluster,
        # before its first change of tier a service has no ready replica
        health=view.health or Health.FALLBACK,
        reason=view.reason or "no replica ready yet",
        wanted=view.wanted or wanted,
        ready=view.ready,
        replicas=replicas,
    )


def _inputs(body: object) -> Any:
    check_request(body, 0)
    assert isinstance(body, dict)
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
    """A model's output as JSON values; NaN and infinities, which JSON cannot
    carry, as None (``null``)."""
    if hasattr(value, "tolist"):  # torch tensors, numpy arrays and scalars
        listed = value.tolist()
        return listed if _all_finite(value) else _json(listed)
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    raise ValueError(f"The model answered a {type(value).__name__}, which has no JSON form.")
