"""The notebook's side of a service: ``serve`` starts it, a :class:`Service` calls it.

A ``Service`` is a handle with a router (:mod:`._router`) of its own: the replica set
is kept by the coordinator in the scheduler (:mod:`._coordinator`), so the service
goes on answering other callers when this kernel dies; ``service(name)`` attaches to
it again from any kernel, and ``services()`` lists them. Its router's traffic is
published as events (:mod:`._meter`), which every view of the service folds.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ft_notebook._paths import checked_name
from ft_notebook.exceptions import NoWorkers, ServeError
from ft_notebook.serve._protocol import ReplicaState, ServiceAction

if TYPE_CHECKING:
    from ft_notebook.events import Event, Health
    from ft_notebook.serve._router import Answer, Router

#: Options of ``serve`` that tune the router; the defaults come from ``ft-notebook.serve``.
ROUTING_OPTIONS = (
    "deadline_s",
    "retries",
    "hedge_budget",
    "max_queue",
    "health_interval_s",
    "health_timeout_s",
    "breaker_failures",
    "breaker_open_s",
    "warmup_timeout_s",
    "max_request_bytes",
    "hedge_max_bytes",
    "fallback_rate",
)


def serve(
    model: Callable[[], Any],
    replicas: int = 3,
    fallback: Callable[[Any], Any] | None = None,
    name: str | None = None,
    cluster: Any = None,
    *,
    example: Any = None,
    wait: bool = True,
    **routing: Any,
) -> Service:
    """Serve ``model()`` from ``replicas`` workers; answers survive lost replicas.

    ``model`` is a factory, built on each replica's worker (a torch module goes to the
    worker's GPU when it has one, in eval mode). ``example`` is an input every replica
    is called with before it takes requests (its health check). ``fallback(x)``
    answers, here in the caller, when no replica can. ``routing`` overrides the
    ``ft-notebook.serve`` settings: ``deadline_s``, ``retries``, ``hedge_budget``,
    ``max_queue``, ``health_interval_s``, ``health_timeout_s``, ``breaker_failures``,
    ``breaker_open_s``, ``warmup_timeout_s``, ``max_request_bytes`` (larger requests
    are refused at once), ``hedge_max_bytes`` (larger ones are never hedged),
    ``sandbox`` (False: re-sent requests and hedges run in the replica itself, not in
    a fork of it; for a model that cannot be forked safely).

    Raises:
        ServeError: bad arguments, a service of this name runs, or the model could
            not be built on any worker (with the worker's traceback).
        NoWorkers: the cluster has no workers.
    """
    import dataclasses
    import uuid

    import cloudpickle

    if not callable(model):
        raise ServeError(
            f"model must be a factory (a callable returning the model), got {model!r}."
        )
    if type(replicas) is not int or replicas < 1:
        raise ServeError(f"replicas must be a positive int, got {replicas!r}.")
    if fallback is not None and not callable(fallback):
        raise ServeError(f"fallback must be a callable fallback(x), got {fallback!r}.")
    settings = _settings(routing)
    name = checked_name(name or f"service-{uuid.uuid4().hex[:6]}", "service name")
    client = _client(cluster)
    if not client.scheduler_info(n_workers=-1)["workers"]:
        raise NoWorkers(
            "The cluster has no workers to put replicas on. Start some (ft.cluster("
            "workers=2) for your own cluster) and call serve again."
        )
    if settings.max_request_bytes is None:
        settings = dataclasses.replace(
            settings, max_request_bytes=auto_request_bytes(client.scheduler_info(n_workers=-1))
        )
    install(client)
    table = client.sync(
        client.scheduler.ft_service,
        action=ServiceAction.CREATE.value,
        name=name,
        factory=cloudpickle.dumps(model),
        replicas=replicas,
        example=None if example is None else cloudpickle.dumps(example),
        fallback=None if fallback is None else cloudpickle.dumps(fallback),
        routing=dataclasses.asdict(settings),
    )
    svc = Service(client, name, settings, fallback, int(table["wanted"]))
    if wait:
        try:
            svc._wait_ready(None, None, closing=True)
        except BaseException:
            # the caller gets no handle to close a service that did not come up, and
            # its name would stay taken (issue 38)
            with contextlib.suppress(Exception):
                svc.close()
            raise
    return svc


def service(name: str, cluster: Any = None) -> Service:
    """Attach to the running service ``name`` (from any kernel of its cluster)."""
    import cloudpickle

    client = _client(cluster)
    install(client)
    found = client.sync(client.scheduler.ft_service, action=ServiceAction.SETUP.value, name=name)
    settings = _settings({k: v for k, v in found["routing"].items() if k in _setting_names()})
    fallback = cloudpickle.loads(found["fallback"]) if found["fallback"] else None
    return Service(client, name, settings, fallback, int(found["wanted"]))


def services(cluster: Any = None) -> list[dict[str, Any]]:
    """The services of the cluster: name, health, replicas wanted, when created."""
    client = _client(cluster)
    install(client)
    return list(client.sync(client.scheduler.ft_service, action=ServiceAction.NAMES.value))


class Service:
    """A service on a cluster, started here or elsewhere (see :func:`service`)."""

    def __init__(self, client: Any, name: str, settings: Any, fallback: Any, wanted: int) -> None:
        from ft_notebook.serve._meter import TrafficMeter, publisher
        from ft_notebook.serve._router import Router

        self.client, self.name, self.settings = client, name, settings
        self.router: Router = Router(client, name, settings, fallback, wanted)
        client.sync(self.router.start)
        # this caller's traffic, for every view of the service (the panel's plots)
        self.traffic = TrafficMeter(self.router, publisher(client, name))
        client.sync(self.traffic.start)
        self._subscription = _follow(client, name, self.router)
        self._removed = False  # close() went through: a second one does nothing

    # -- answers

    def predict(self, x: Any, **options: Any) -> Any:
        """The answer to ``x`` (``deadline_s=``, ``retries=``, ``hedge=`` per call)."""
        return self.call(x, **options).value

    def call(self, x: Any, **options: Any) -> Answer:
        """The answer to ``x`` with where it came from: replica, tier, retries, hedged."""
        self.router.check_open()
        # with no replica in rotation the fallback answers here, in this thread
        answer = self.router.fallback_here(x)
        if answer is None:
            answer = self.client.sync(self.router.call, x, **options)
        return answer

    async def apredict(self, x: Any, **options: Any) -> Any:
        return (await self.acall(x, **options)).value

    async def acall(self, x: Any, **options: Any) -> Answer:
        import asyncio

        loop = self.client.loop.asyncio_loop
        future = asyncio.run_coroutine_threadsafe(self.router.call(x, **options), loop)
        return await asyncio.wrap_future(future)

    # -- the replica set

    def table(self) -> dict[str, Any]:
        """The coordinator's replica table, fresh."""
        return self._ask(ServiceAction.TABLE)

    def status(self) -> dict[str, Any]:
        """The coordinator's table and this caller's view: breakers, latencies, counts."""
        table = self.table()
        return {**table, "router": self.router.status()}

    def dashboard(self, *, period: float = 0.5, widgets: bool = True) -> Any:
        """A live view of the service: a tile per replica, the tier and its reason,
        requests/s, p50/p99 and the fallback's share over time (as this caller sees
        them), refreshed every ``period`` seconds."""
        from ft_notebook.events import history, service_topic, subscribe
        from ft_notebook.widgets import ServiceDashboard

        topic = service_topic(self.name)

        def follow(callback: Callable[[Any], None]) -> Any:
            # the scheduler's recent events too: a subscription replays this machine's
            # journal only, which lacks what a coordinator on another machine published
            past = history(topic, via=self.client)
            for event in past:
                callback(event)
            since = max((e.seq for e in past), default=0)
            return subscribe(topic, callback, via=self.client, since=since)

        return ServiceDashboard(
            self.name, self.router.status, follow, period=period, widgets=widgets
        )

    @property
    def health(self) -> Health:
        from ft_notebook.events import Health

        return Health(self.table()["health"])

    def scale(self, replicas: int) -> dict[str, Any]:
        if type(replicas) is not int or replicas < 1:
            raise ServeError(f"replicas must be a positive int, got {replicas!r}.")
        return self._ask(ServiceAction.SCALE, replicas=replicas)

    def wait_ready(self, replicas: int | None = None, timeout: float | None = None) -> Service:
        """Block until ``replicas`` (all by default) are ready and in this router.

        ``timeout`` None: the service's ``warmup_timeout_s`` (``serve``'s option, else
        ``ft-notebook.serve.warmup-timeout``), as long as a replica may take to warm up.
        """
        return self._wait_ready(replicas, timeout, closing=False)

    def _wait_ready(self, replicas: int | None, timeout: float | None, *, closing: bool) -> Service:
        closed = " serve() closed it again, so its name is free." if closing else ""
        if timeout is None:
            timeout = float(self.settings.warmup_timeout_s)
        deadline = time.monotonic() + timeout
        while True:
            table = self.table()
            want = table["wanted"] if replicas is None else replicas
            ready = [r for r in table["replicas"] if r["state"] == ReplicaState.READY]
            routed = [v for v in list(self.router.views.values()) if v.breaker.in_rotation()]
            if len(ready) >= want and len(routed) >= want:
                return self
            failed = table["failed_on"]
            live = len(self.client.scheduler_info(n_workers=-1)["workers"])
            if failed and len(failed) >= live:
                first = next(iter(failed.items()))
                raise ServeError(
                    f"The model of service {self.name!r} could not be built on any worker "
                    f"({len(failed)} tried).{closed} On worker {first[0]}: {first[1]}"
                )
            if time.monotonic() > deadline:
                raise ServeError(
                    f"Service {self.name!r} has {len(ready)} of {want} replicas ready after "
                    f"{timeout:g} s: {table['reason']}."
                    + (closed or " It goes on trying; svc.status() shows why.")
                )
            self.client.sync(self.router.rotation.refresh)
            time.sleep(0.02)  # waiting on remote warm-up; the table says when it is done

    def close(self) -> None:
        """Stop the service on the cluster (every caller's replicas go). Calls through
        this handle then raise ServiceClosed; closing again does nothing."""
        if self._removed:
            return
        self.detach()
        self._ask(ServiceAction.REMOVE)
        self._removed = True

    def detach(self) -> None:
        """Stop routing from here; the service goes on for its other callers."""
        if self._subscription is not None:
            self._subscription.close()
            self._subscription = None
        self.client.sync(self.traffic.stop)  # its last window, before the router stops
        self.client.sync(self.router.stop)

    def _ask(self, action: ServiceAction, **kwargs: Any) -> dict[str, Any]:
        """The coordinator's answer to ``action`` about this service."""
        return dict(
            self.client.sync(
                self.client.scheduler.ft_service, action=action.value, name=self.name, **kwargs
            )
        )

    def __repr__(self) -> str:
        r = self.router
        return f"Service {self.name!r}: {r.tier.value} ({r.tier_reason})"


def _follow(client: Any, name: str, router: Router) -> Any:
    """Act on the coordinator's replica events as they are pushed, on the router's loop."""
    import asyncio

    from ft_notebook.events import (
        HealthChanged,
        ReplicaLost,
        ReplicaReady,
        ServiceScaled,
        service_topic,
        subscribe,
    )

    loop = client.loop.asyncio_loop
    started = time.time()
    rotation = router.rotation

    def on_event(event: Event) -> None:
        if event.time < started:  # the journal's past: the table already has it
            return
        payload = event.payload()
        if isinstance(payload, ReplicaLost):
            loop.call_soon_threadsafe(rotation.lost, payload.address, payload.cause, payload.detail)
        elif isinstance(payload, (ReplicaReady, HealthChanged, ServiceScaled)):
            asyncio.run_coroutine_threadsafe(rotation.refresh(), loop)

    try:
        return subscribe(service_topic(name), on_event, via=client)
    except Exception:  # no live events: the router's refresh loop still follows the table
        return None


def install(client: Any) -> None:
    """Put the service coordinator and the replica handlers on the cluster (idempotent),
    with the control plane they build on."""
    from ft_notebook.cluster import install_plugins
    from ft_notebook.serve._coordinator import ServiceCoordinator
    from ft_notebook.serve._replica import ReplicaHandlers

    install_plugins(client)
    client.register_plugin(ReplicaHandlers())
    client.register_plugin(ServiceCoordinator())


def auto_request_bytes(info: dict[str, Any]) -> int:
    """``max-request-bytes: auto``: a 32nd of the smallest worker's memory limit (of
    this machine's memory shared by the workers, where they have no limit), at least
    1 MiB. A model's intermediates are many times its input: a 1 GB request took every
    replica of a small MLP down, each worker in turn restarted by its memory limit."""
    import psutil

    workers = list(info.get("workers", {}).values())
    limits = [int(w["memory_limit"]) for w in workers if w.get("memory_limit")]
    memory = min(limits) if limits else psutil.virtual_memory().total // max(1, len(workers))
    return max(2**20, memory // 32)


def _setting_names() -> set[str]:
    import dataclasses

    from ft_notebook._settings import ServeConfig

    return {f.name for f in dataclasses.fields(ServeConfig)}


def _settings(routing: dict[str, Any]) -> Any:
    import dataclasses

    from ft_notebook.config import get_config

    unknown = sorted(set(routing) - _setting_names())
    if unknown:
        raise ServeError(
            f"serve() got unknown options {unknown}; it takes {sorted(ROUTING_OPTIONS)}."
        )
    return dataclasses.replace(get_config().serve, **routing)


def _client(cluster: Any) -> Any:
    from ft_notebook.cluster import client_for

    return client_for(cluster)
