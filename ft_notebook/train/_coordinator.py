"""The run coordinator: a SchedulerPlugin that drives every training run of a cluster.

It lives in the scheduler, so a run goes on when the notebook kernel that started it
dies. It starts one rank actor per worker, decides the generations (which workers
train together, and how their group is made), and keeps the run's record: state,
step, history, recoveries, errors. It learns of deaths and hangs from the control
plane's membership listener, and of everything else from the ranks' reports
(handled in :mod:`._reports`; the watchdog is :mod:`._watch`).

Recovery (see :mod:`._protocol`): a single lost rank of a generation whose survivor
groups are ready takes the fast path (``survive``: no rendezvous); anything else, or
the fast path turned off, forms a new group. Fewer than ``min_workers`` survivors park
the ranks (STALLED) until workers come back. A worker that joins warms up first and
is admitted by a new generation once it is ready.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.protocol.pickle import dumps
from distributed.protocol.serialize import Serialized, deserialize

from ft_notebook.cluster.plugins import control_plane, name_key
from ft_notebook.events import (
    Health,
    HealthChanged,
    RunState,
    RunStateChanged,
    publish,
    run_topic,
)
from ft_notebook.train import _rank
from ft_notebook.train._protocol import Plan, generation_prefix
from ft_notebook.train._record import Options, Record
from ft_notebook.train._reports import RunReports
from ft_notebook.train._watch import RunWatch

logger = logging.getLogger(__name__)

PLUGIN_NAME = "ft-notebook-runs"


class RunCoordinator(RunReports, RunWatch, SchedulerPlugin):
    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.scheduler: Any = None
        self.runs: dict[str, Record] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watch: asyncio.Task[None] | None = None
        self.store_address: tuple[str, int] = ("", 0)  # the rendezvous TCPStore

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.control = control_plane(scheduler)
        self.control.add_listener(self.on_membership)
        self._watch = asyncio.ensure_future(self._watchdog())

    async def close(self) -> None:
        self.control.remove_listener(self.on_membership)
        if self._watch is not None:
            self._watch.cancel()
        for task in list(self._tasks):
            task.cancel()

    # ---- API (through Client.run_on_scheduler)

    def submit(self, name: str, spec: bytes, options: Options) -> dict[str, Any]:
        existing = self.runs.get(name)
        if existing is not None and not existing.finished:
            from ft_notebook.exceptions import TrainingError

            raise TrainingError(
                f"A run named {name!r} is already {existing.state.value} on this cluster. "
                f"Attach to it with ft.attach({name!r}), or pick another name."
            )
        record = Record(name, spec, options)
        self.runs[name] = record
        self.control.hold(f"run:{name}")
        self._spawn(self._launch(record))
        return record.info()

    def cancel(self, name: str) -> dict[str, Any]:
        record = self._get(name)
        if not record.finished:
            self._finish(record, RunState.CANCELLED, "cancelled by the user")
        return record.info()

    def info(self, name: str) -> dict[str, Any]:
        return self._get(name).info()

    def _get(self, name: str) -> Record:
        record = self.runs.get(name)
        if record is None:
            from ft_notebook.exceptions import TrainingError

            raise TrainingError(
                f"No run named {name!r} on this cluster (runs here: {sorted(self.runs)})."
            )
        return record

    # ---- launch and plans

    def _workers(self) -> dict[str, str]:
        """Running workers: name -> address, in name order."""
        found = {str(ws.name): addr for addr, ws in self.scheduler.workers.items()}
        return dict(sorted(found.items(), key=lambda kv: name_key(kv[0])))

    async def _launch(self, record: Record) -> None:
        try:
            await self._start_run(record)
        except Exception as e:
            logger.exception("could not start run %s", record.name)
            if not record.finished:
                self._finish(record, RunState.FAILED, f"the run could not start: {e}")

    async def _start_run(self, record: Record) -> None:
        self.store_address = await self.control.rendezvous_store()
        workers = list(self._workers().items())
        limit = record.options.max_workers or len(workers)
        chosen = workers[:limit]
        record.target_world = len(chosen)
        await asyncio.gather(*(self._start_actor(record, n, a, first=True) for n, a in chosen))
        deadline = time.time() + record.options.warmup_timeout_s
        while not record.finished and time.time() < deadline:
            if record.ready >= set(record.actors):
                break
            await asyncio.sleep(0.02)
        if record.finished:
            return
        ready = [n for n in record.actors if n in record.ready]
        if len(ready) < max(1, record.options.min_workers):
            self._finish(
                record,
                RunState.FAILED,
                f"{len(ready)} worker(s) finished warming up in time, "
                f"min_workers={record.options.min_workers}",
            )
            return
        self._set_state(record, RunState.RUNNING, f"{len(ready)} workers")
        self._new_plan(record, ready, how="form")

    async def _start_actor(self, record: Record, name: str, address: str, first: bool) -> None:
        record.actors[name] = address
        record.seen.add(name)
        try:
            await self._call(
                address, _rank.start_rank, record.spec, record.name, name, first, record.incarnation
            )
        except Exception as e:
            if record.actors.get(name) == address:
                record.actors.pop(name, None)
            logger.warning("could not start a rank of %s on %s: %s", record.name, name, e)
            return
        if record.finished and record.plan is not None:
            # the run ended while this rank started: its stop plan may have reached the
            # worker before the actor existed ("no-actor"), and an actor never stopped
            # keeps its model and data, and draws beside the next run's ranks
            await self._deliver(record, name, address, record.plan)

    def _new_plan(
        self, record: Record, members: list[str], how: str, lost: str | None = None, stop: str = ""
    ) -> Plan:
        old = record.plan
        record.parts = max(record.parts, len(members))
        plan = Plan(
            run=record.name,
            gen=(old.gen if old is not None else 0) + 1,
            members=tuple(members),
            store=self.store_address,
            how=how,
            base=old.gen if old is not None and how == "survive" else None,
            lost=lost,
            stop=stop,
            committed=record.highest_step,
            incarnation=record.incarnation,
            parts=record.parts,
        )
        record.plan = plan
        self._forget_retired(record, plan)
        if not stop:
            record.world = len(plan.members)
        for name, address in list(record.actors.items()):
            self._spawn(self._deliver(record, name, address, plan))
        return plan

    def _forget_retired(self, record: Record, plan: Plan) -> None:
        """Delete the rendezvous keys of groups that can never be used again: those of
        generation gen-2 and older (gen-1's survivor groups may still be switched to,
        and an NCCL group reads its keys at its first collective), or all of them
        once the run stops."""
        if plan.stop:
            prefix = generation_prefix(record.name, record.incarnation)
        elif plan.gen > 2:
            prefix = generation_prefix(record.name, record.incarnation, plan.gen - 2)
        else:
            return
        self._spawn(self.control.forget_rendezvous(prefix))

    async def _deliver(self, record: Record, name: str, address: str, plan: Plan) -> None:
        try:
            answer = await self._call(address, _rank.deliver, record.name, plan.to_wire())
        except Exception:  # the worker is going: the control plane reports the loss
            return
        gone = answer == "no-actor" and not plan.stop and record.actors.get(name) == address
        if gone and record.plan is plan and name in plan.members:
            del record.actors[name]
            record.ready.discard(name)
            self._lost(record, [name], "its rank actor is gone")

    async def _call(self, address: str, fn: Any, *args: Any) -> Any:
        result = await self.scheduler.broadcast(
            msg={"op": "run", "function": dumps(fn), "args": dumps(args), "kwargs": dumps({})},
            workers=[address],
            on_error="return",
        )
        out = result.get(address)
        if isinstance(out, dict) and out.get("status") == "OK":
            value = out.get("result")
            if isinstance(value, Serialized):  # the scheduler leaves results serialized
                # our own worker's answer, over the cluster's authenticated connection
                value = deserialize(value.header, value.frames)
            return value
        raise RuntimeError(f"calling {getattr(fn, '__name__', fn)} on {address}: {out!r}")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                logger.error("run coordinator task failed", exc_info=t.exception())

        task.add_done_callback(done)

    # ---- membership (from the control plane)

    def on_membership(self, kind: str, name: str, address: str, cause: str) -> None:
        for record in list(self.runs.values()):
            if record.finished:
                continue
            if kind in ("lost", "hung"):
                if record.actors.get(name) == address:
                    del record.actors[name]
                    record.ready.discard(name)
                    self._lost(record, [name], cause or f"worker {kind}")
            elif kind == "joined" and name not in record.actors:
                limit = record.options.max_workers
                if limit is None or len(record.actors) < limit:
                    record.arrivals[name] = time.time()
                    self._spawn(self._start_actor(record, name, address, first=False))

    def _lost(self, record: Record, names: list[str], cause: str) -> None:
        plan = record.plan
        if plan is None or plan.stop or not set(names) & set(plan.members):
            return
        survivors = [m for m in plan.members if m not in names and m in record.actors]
        now = time.time()
        if record.pending is None:
            record.pending = {
                "cause": f"{', '.join(names)}: {cause}",
                "detected_at": now,
                "workers_before": len(plan.members),
                "highest_step": record.highest_step,
                "lost": list(names),
            }
        else:  # a loss during recovery: one recovery, more causes
            record.pending["cause"] += f"; {', '.join(names)}: {cause}"
            record.pending["lost"] += list(names)
        self._set_health(record, Health.DEGRADED, record.pending["cause"])
        if len(survivors) < record.options.min_workers:
            self._set_state(
                record,
                RunState.STALLED,
                f"{len(survivors)} worker(s) left, min_workers={record.options.min_workers}",
            )
            self._new_plan(record, [], how="form")
            return
        self._set_state(record, RunState.RECOVERING, record.pending["cause"])
        self._publish_progress(record, force=True)  # dashboards: the lost tile at once
        prepared = record.prepared.get(plan.gen, set())
        fast = (
            record.options.fast_recovery
            and len(names) == 1
            and prepared >= set(plan.members) - set(names)
            and record.synced.get(plan.gen, set()) >= set(plan.members) - set(names)
        )
        self._new_plan(record, survivors, how="survive" if fast else "form", lost=names[0])

    def _admit(self, record: Record) -> None:
        """Ready workers not in the generation join it (at the next step boundary)."""
        plan = record.plan
        if plan is None or plan.stop or record.finished:
            return
        waiting = [n for n in record.actors if n in record.ready and n not in plan.members]
        if not waiting:
            return
        members = sorted([m for m in plan.members if m in record.actors] + waiting, key=name_key)
        if len(members) < record.options.min_workers:
            return
        if record.state is RunState.STALLED:
            self._set_state(record, RunState.RECOVERING, f"{len(members)} workers back")
        plan = self._new_plan(record, members, how="form")
        self._publish_progress(record, force=True)
        for name in waiting:
            record.admitting[name] = {
                "name": name,
                "arrived_at": record.arrivals.pop(name, time.time()),
                "generation": plan.gen,
            }

    # ---- state

    def _finish(self, record: Record, state: RunState, reason: str) -> None:
        record.finished_at = time.time()
        record.spec = b""  # the pickled factories and dataset are not needed any more
        self._set_state(record, state, reason)
        self._publish_progress(record, force=True)
        self._new_plan(record, [], how="form", stop=state.value.lower())
        self.control.release(f"run:{record.name}")

    def _set_state(self, record: Record, state: RunState, reason: str) -> None:
        if record.state is state:
            return
        previous, record.state, record.reason = record.state, state, reason
        self._publish(record, RunStateChanged(state=state, previous=previous, reason=reason))

    def _update_health(self, record: Record) -> None:
        plan = record.plan
        world = len(plan.members) if plan is not None else 0
        if world >= record.target_world:
            self._set_health(record, Health.HEALTHY, f"{world} workers")
        else:
            self._set_health(record, Health.DEGRADED, f"{world} of {record.target_world} workers")

    def _set_health(self, record: Record, health: Health, reason: str) -> None:
        if record.health is health:
            return
        previous, record.health = record.health, health
        self._publish(record, HealthChanged(health=health, previous=previous, reason=reason))

    def _publish(self, record: Record, payload: Any) -> None:
        try:
            publish(
                payload,
                run_topic(record.name),
                run=record.name,
                via=self.scheduler,
                step=record.step,
            )
        except Exception:
            logger.exception("could not publish %s of run %s", payload.kind, record.name)


def coordinator(scheduler: Any) -> RunCoordinator:
    plugin = scheduler.plugins.get(PLUGIN_NAME)
    if not isinstance(plugin, RunCoordinator):
        from ft_notebook.exceptions import TrainingError

        raise TrainingError("The scheduler has no run coordinator; ft.fit installs it.")
    return plugin
