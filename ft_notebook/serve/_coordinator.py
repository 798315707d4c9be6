"""The service coordinator: a SchedulerPlugin that keeps every service's replica set.

It lives in the scheduler, so a service goes on serving when the kernel that started
it dies. It places replicas on workers (spread: one per worker while there are
workers enough), starts them through the replica handlers (:mod:`._replica`), and
admits a replica only once it has built its model and passed its health check. When
the control plane reports a worker lost, its replicas are LOST at once (an event that
every caller's router acts on) and are placed again on a worker that joins or
restarts. The service's health follows its ready replicas: HEALTHY (all), DEGRADED
(some), FALLBACK (none).

Kernels reach it through one scheduler handler, ``ft_service``, whose ``action`` (a
:class:`~._protocol.ServiceAction`) picks an entry of :data:`ACTIONS`; an unknown
action is an error. A replica moves through the states of
:class:`~._protocol.ReplicaState`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from ft_notebook._reasons import Reason, explain
from ft_notebook.cluster.plugins import control_plane, name_key
from ft_notebook.events import (
    Health,
    HealthChanged,
    ReplicaFailed,
    ReplicaLost,
    ReplicaReady,
    ServiceClosed,
    ServiceScaled,
    ServiceStarted,
    publish,
    service_topic,
)
from ft_notebook.exceptions import ServeError
from ft_notebook.serve._policy import tier_of
from ft_notebook.serve._protocol import SCHEDULER_HANDLER, ReplicaState, ServiceAction
from ft_notebook.serve._table import Service, Slot, _index

logger = logging.getLogger(__name__)

PLUGIN_NAME = "ft-notebook-services"
_POLL_S = 0.02
_RETRY_S = 0.2
_MAX_TRIES = 25


class ServiceCoordinator(SchedulerPlugin):
    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.scheduler: Any = None
        self.services: dict[str, Service] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.control = control_plane(scheduler)
        self.control.add_listener(self.on_membership)
        scheduler.handlers[SCHEDULER_HANDLER] = self.handle

    async def close(self) -> None:
        self.control.remove_listener(self.on_membership)
        for task in list(self._tasks):
            task.cancel()

    # ---- the kernels' entry point

    async def handle(self, action: str, **kwargs: Any) -> Any:
        try:
            method = ACTIONS[ServiceAction(action)]
        except ValueError:
            raise ServeError(
                f"Unknown service action {action!r}; this scheduler knows "
                f"{sorted(a.value for a in ServiceAction)}. Are the kernel and the cluster "
                f"on the same ft_notebook version?"
            ) from None
        return method(self, **kwargs)

    def create(
        self,
        name: str,
        factory: bytes,
        replicas: int,
        routing: dict[str, Any],
        example: bytes | None = None,
        fallback: bytes | None = None,
    ) -> dict[str, Any]:
        """Start service ``name``; ``routing`` is every ``ServeConfig`` setting, as the
        calling kernel resolved them."""
        if name in self.services:
            raise ServeError(
                f"A service named {name!r} already runs on this cluster. Attach to it with "
                f"ft.service({name!r}), close it with ft.service({name!r}).close(), or pick "
                f"another name."
            )
        service = Service(name, factory, example, fallback, replicas, dict(routing))
        service.slots = {i: Slot(i) for i in range(replicas)}
        service.per_worker = max(1, math.ceil(replicas / max(1, len(self.scheduler.workers))))
        self.services[name] = service
        self.control.hold(f"service:{name}")
        self._publish(service, ServiceStarted(replicas))
        self._reconcile(service)
        return service.table()

    def table(self, name: str) -> dict[str, Any]:
        return self._get(name).table()

    def setup(self, name: str) -> dict[str, Any]:
        """What a kernel attaching to the service needs: its table, fallback, routing."""
        service = self._get(name)
        return {**service.table(), "fallback": service.fallback, "routing": service.routing}

    def names(self) -> list[dict[str, Any]]:
        return [
            {"name": s.name, "health": s.health.value, "wanted": s.wanted, "created": s.created}
            for s in sorted(self.services.values(), key=lambda s: s.created)
        ]

    def scale(self, name: str, replicas: int) -> dict[str, Any]:
        service = self._get(name)
        for index in [i for i in service.slots if i >= replicas]:
            self._stop_slot(service, service.slots.pop(index), "scaled down")
        for index in range(replicas):
            service.slots.setdefault(index, Slot(index))
        if replicas != service.wanted:
            self._publish(service, ServiceScaled(replicas, service.wanted))
        service.wanted = replicas
        live = len(self.scheduler.workers)
        service.per_worker = max(1, math.ceil(replicas / max(1, live)))
        self._changed(service)
        self._reconcile(service)
        return service.table()

    def remove(self, name: str) -> dict[str, Any]:
        service = self._get(name)
        for slot in service.slots.values():
            self._stop_slot(service, slot, "service closed")
        self._publish(service, ServiceClosed())
        del self.services[name]
        self.control.release(f"service:{name}")
        return {"name": name, "closed": True}

    def failing(self, name: str, replica: str, incarnation: str, error: str) -> dict[str, Any]:
        """A replica's model raises on every call (``error``), or answers again ("")."""
        service = self._get(name)
        slot = service.slots.get(int(replica.rsplit("/", 1)[1]))
        if slot is not None and slot.incarnation == incarnation and slot.failing != error:
            slot.failing = error
            index = replica.rsplit("/", 1)[1]
            told = f"replica {index}: {error}" if error else f"replica {index} answers again"
            self._changed(service, told)
        return service.table()

    def _get(self, name: str) -> Service:
        service = self.services.get(name)
        if service is None:
            raise ServeError(
                f"No service named {name!r} on this cluster (services here: "
                f"{sorted(self.services)}). ft.services() lists them."
            )
        return service

    # ---- membership

    def on_membership(self, kind: str, name: str, address: str, cause: str) -> None:
        for service in list(self.services.values()):
            if kind in ("lost", "hung"):
                for slot in service.slots.values():
                    if slot.address == address and slot.state.placed:
                        said = explain(cause or kind, replica=slot.index, worker=name)
                        raw = f"worker {name} {kind}: {cause}".rstrip(": ")
                        self._lose(service, slot, Reason(said.text, raw, said.kind))
            elif kind == "joined":
                self._rebalance(service, name)
            self._reconcile(service)

    def _rebalance(self, service: Service, joined: str) -> None:
        """A worker came back: the replicas placed while it was away, as many a worker
        as the live ones allowed (5 on 2 workers, 3 and 2), spread again: the most
        loaded worker's newest replica moves to it, until no worker holds more than
        the spread over the workers now needs. Its others serve meanwhile."""
        live = len(self.scheduler.workers)
        # only ever fewer a worker: a worker that is first back after all were lost
        # takes one replica, not all of them (the model's memory, thrice)
        spread = max(1, math.ceil(service.wanted / max(1, live)))
        service.per_worker = min(service.per_worker, spread)
        held: dict[str, list[Slot]] = {}
        for slot in service.slots.values():
            if slot.state.placed:
                held.setdefault(slot.worker, []).append(slot)
        moved = [
            slot
            for worker, slots in held.items()
            if worker != joined
            for slot in sorted(slots, key=_index)[service.per_worker :]
        ]
        for slot in moved:
            self._stop_slot(service, slot, f"moved to worker {joined}, which is back")
            slot.state = ReplicaState.WAITING
        if moved:
            self._changed(service, f"{len(moved)} replica(s) moving to worker {joined}")

    def _lose(self, service: Service, slot: Slot, why: Reason) -> None:
        replica = f"{service.name}/{slot.index}"
        lost = ReplicaLost(replica, slot.worker, slot.address, why.text, why.detail)
        self._publish(service, lost)
        slot.state, slot.since, slot.cause = ReplicaState.LOST, time.time(), why.text
        slot.address, slot.detail = "", why.detail
        self._changed(service, why)

    # ---- placement

    def _workers(self) -> dict[str, str]:
        return {str(ws.name): addr for addr, ws in self.scheduler.workers.items()}

    def _reconcile(self, service: Service) -> None:
        workers = self._workers()
        held: dict[str, int] = {}
        for slot in service.slots.values():
            if slot.state.placed and slot.address in self.scheduler.workers:
                held[slot.worker] = held.get(slot.worker, 0) + 1
        for slot in sorted(service.slots.values(), key=_index):
            if slot.state.placed:
                continue
            free = [
                w
                for w in workers
                if held.get(w, 0) < service.per_worker and w not in service.failed_on
            ]
            if not free:
                continue
            worker = min(free, key=lambda w: (held.get(w, 0), name_key(w)))
            held[worker] = held.get(worker, 0) + 1
            slot.worker, slot.address = worker, workers[worker]
            slot.state, slot.since, slot.cause = ReplicaState.WARMING, time.time(), ""
            slot.incarnation = uuid.uuid4().hex[:12]
            self._spawn(self._start(service, slot, slot.incarnation))

    async def _start(self, service: Service, slot: Slot, incarnation: str) -> None:
        key, address = f"{service.name}/{slot.index}", slot.address
        # the kernel's settings, whole (serve() sends them): the scheduler's own
        # configuration plays no part, and no default is repeated here
        warmup = float(service.routing["warmup_timeout_s"])
        deadline = time.time() + warmup
        try:
            rpc = self.scheduler.rpc(address)
            answer = await rpc.ft_serve_start(
                key=key, incarnation=incarnation, factory=service.factory, example=service.example
            )
            if answer not in ("started", "running"):  # a worker without the handler: None
                raise RuntimeError(f"the worker answered {answer!r} to ft_serve_start")
            while time.time() < deadline:
                if slot.incarnation != incarnation or service.slots.get(slot.index) is not slot:
                    return  # lost, moved or scaled away meanwhile
                found = await rpc.ft_serve_state(key=key)
                if found and found["state"] == ReplicaState.READY:
                    slot.state, slot.since, slot.tries = ReplicaState.READY, time.time(), 0
                    self._publish(
                        service,
                        ReplicaReady(key, slot.worker, address, round(found["warmup_s"], 3)),
                    )
                    self._changed(service, f"replica {slot.index} ready on worker {slot.worker}")
                    return
                if found and found["state"] == ReplicaState.FAILED:
                    raise _FactoryFailed(found["error"])
                await asyncio.sleep(_POLL_S)
            raise _FactoryFailed(f"the model did not build within {warmup:g} s")
        except _FactoryFailed as e:
            if slot.incarnation == incarnation:
                service.failed_on[slot.worker] = str(e)
                why = explain(str(e), replica=slot.index, worker=slot.worker, building=True)
                self._failed(service, slot, why)
                self._reconcile(service)  # another worker may build it
        except Exception as e:
            if address not in self.scheduler.workers:
                return  # the worker went away: the control plane's loss re-places it
            # a worker that has just joined may not have run the replica plugin's
            # setup yet ("No handler ft_serve_start"): try again, as a new placement
            logger.info("starting %s on %s: %s; trying again", key, address, e)
            if slot.incarnation != incarnation or slot.state is not ReplicaState.WARMING:
                return
            slot.tries += 1
            if slot.tries > _MAX_TRIES:  # not a race: say so and try another worker
                service.failed_on[slot.worker] = f"the worker does not start replicas: {e}"
                why = Reason(
                    f"replica {slot.index} could not start on worker {slot.worker}",
                    f"{type(e).__name__}: {e}",
                )
                self._failed(service, slot, why)
                self._reconcile(service)
                return
            await asyncio.sleep(_RETRY_S)
            if slot.incarnation == incarnation and address in self.scheduler.workers:
                slot.state = ReplicaState.WAITING
                self._reconcile(service)

    def _failed(self, service: Service, slot: Slot, why: Reason) -> None:
        key = f"{service.name}/{slot.index}"
        self._publish(service, ReplicaFailed(key, slot.worker, why.text, why.detail))
        slot.state, slot.cause, slot.detail = ReplicaState.FAILED, why.text, why.detail
        slot.address = ""
        self._changed(service, why)

    def _stop_slot(self, service: Service, slot: Slot, cause: str) -> None:
        if slot.address:
            key, address = f"{service.name}/{slot.index}", slot.address

            async def stop() -> None:
                await self.scheduler.rpc(address).ft_serve_stop(key=key)

            self._spawn(stop())
        slot.state, slot.cause, slot.incarnation = ReplicaState.LOST, cause, ""
        slot.detail = ""

    # ---- health

    def _changed(self, service: Service, reason: str | Reason = "") -> None:
        service.version += 1
        ready = [s for s in service.slots.values() if s.state is ReplicaState.READY]
        health = tier_of(len(ready), service.wanted)
        summary = f"{len(ready)} of {service.wanted} replicas ready"
        failing = [s for s in ready if s.failing]
        if failing:  # up, but its model raises on every call: not HEALTHY
            health = Health.DEGRADED
            summary += f", {len(failing)} failing every call ({failing[0].failing})"
        said = reason if isinstance(reason, Reason) else Reason(reason)
        why = f"{summary}: {said.text}" if said.text else summary
        if health is not service.health:
            self._publish(service, HealthChanged(health, service.health, why, said.detail))
        service.health, service.reason, service.detail = health, why, said.detail

    def _publish(self, service: Service, payload: Any) -> None:
        try:
            publish(payload, service_topic(service.name), via=self.scheduler)
        except Exception:
            logger.exception("could not publish %s for %s", payload.kind, service.name)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class _FactoryFailed(Exception):
    pass


ACTIONS: dict[ServiceAction, Callable[..., Any]] = {
    ServiceAction.CREATE: ServiceCoordinator.create,
    ServiceAction.TABLE: ServiceCoordinator.table,
    ServiceAction.SETUP: ServiceCoordinator.setup,
    ServiceAction.NAMES: ServiceCoordinator.names,
    ServiceAction.SCALE: ServiceCoordinator.scale,
    ServiceAction.REMOVE: ServiceCoordinator.remove,
    ServiceAction.FAILING: ServiceCoordinator.failing,
}
