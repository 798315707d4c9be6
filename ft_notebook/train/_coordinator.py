"""The run coordinator: a SchedulerPlugin that drives every training run of a cluster.

It lives in the scheduler, so a run goes on when the notebook kernel that started it
dies. It starts one rank actor per worker, decides the generations (which workers
train together, and how their group is made), and keeps the run's record: state,
step, history, recoveries, errors. It learns of deaths and hangs from the control
plane's membership listener, and of everything else from the ranks' reports.

Recovery (see :mod:`._protocol`): a single lost rank of a generation whose survivor
groups are ready takes the fast path (``survive``: no rendezvous); anything else, or
the fast path turned off, forms a new group. Fewer than ``min_workers`` survivors park
the ranks (STALLED) until workers come back. A worker that joins warms up first and
is admitted by a new generation once it is ready.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.protocol.pickle import dumps
from distributed.protocol.serialize import Serialized, deserialize

from ft_notebook.cluster.plugins import control_plane
from ft_notebook.events import (
    CheckpointFailed,
    Health,
    HealthChanged,
    RecoveryCompleted,
    RolledBack,
    RunState,
    RunStateChanged,
    StepSkipped,
    publish,
    run_topic,
)
from ft_notebook.train import _rank
from ft_notebook.train._protocol import REPORT_TOPIC, Plan, Report
from ft_notebook.train._record import Options, Record, name_key
from ft_notebook.train._watch import RunWatch

logger = logging.getLogger(__name__)

PLUGIN_NAME = "ft-notebook-runs"
_HISTORY_MAX = 2000


class RunCoordinator(RunWatch, SchedulerPlugin):
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

    def _new_plan(
        self, record: Record, members: list[str], how: str, lost: str | None = None, stop: str = ""
    ) -> Plan:
        old = record.plan
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
        )
        record.plan = plan
        if not stop:
            record.world = len(plan.members)
        for name, address in list(record.actors.items()):
            self._spawn(self._deliver(record, name, address, plan))
        return plan

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

    # ---- reports (from the ranks, through the event log)

    def log_event(self, topic: str, msg: Any) -> None:
        if topic != REPORT_TOPIC or not isinstance(msg, dict):
            return
        report = Report.from_wire(msg)
        record = self.runs.get(report.run)
        if record is None or record.finished:
            return
        if report.data.get("incarnation", record.incarnation) != record.incarnation:
            return  # a late report of an earlier run of this name
        try:
            self._on_report(record, report)
        except Exception:
            logger.exception("could not handle the report %r", report)

    def _on_report(self, record: Record, r: Report) -> None:
        record.highest_step = max(record.highest_step, r.step)
        plan = record.plan
        kind = r.kind
        if kind == "ready":
            record.ready.add(r.name)
            if r.step > 0 and plan is None:
                record.resumed_from = max(record.resumed_from or 0, r.step)
            if plan is not None:
                self._admit(record)
        elif kind == "synced":
            record.synced.setdefault(r.gen, set()).add(r.name)
            record.step = max(record.step, r.step)
            if plan is not None and r.gen == plan.gen and record.synced[r.gen] >= set(plan.members):
                record.last_advance = time.time()
                if record.pending is None:
                    if record.state is not RunState.RUNNING:
                        self._set_state(record, RunState.RUNNING, f"{len(plan.members)} workers")
                    self._update_health(record)
        elif kind == "prepared":
            gen = int(r.data.get("prepared_gen", r.gen))
            record.prepared.setdefault(gen, set()).add(r.name)
        elif kind == "progress":
            self._progress(record, r)
        elif kind == "eval":
            self._evaluated(record, r)
        elif kind == "resumed":
            self._resumed(record, r)
        elif kind == "nonfinite":
            record.nonfinite += 1
            step, streak = int(r.data.get("at_step", r.step)), int(r.data.get("streak", 1))
            record.notes.append({"kind": kind, "time": r.time, "step": step})
            self._publish(record, StepSkipped(skipped_step=step, streak=streak))
        elif kind == "rollback":
            record.notes.append({"kind": kind, "time": r.time, **r.data})
            self._publish(
                record,
                RolledBack(
                    from_step=int(r.data["from_step"]),
                    to_step=int(r.data["to_step"]),
                    skipped_steps=tuple(int(s) for s in r.data.get("skipped", [])),
                ),
            )
        elif kind == "checkpoint-failed":
            record.notes.append({"kind": kind, "time": r.time, **r.data})
            record.lagging = True
            self._publish(
                record,
                CheckpointFailed(
                    checkpoint_step=r.step,
                    error=str(r.data.get("error", "")),
                    retry_at_step=int(r.data.get("retry_at", 0)),
                ),
            )
        elif kind == "checkpoint":
            record.checkpoint = r.data.get("checkpoint_step")
            record.lagging = False
        elif kind == "peer-failed":
            if plan is not None and r.data.get("plan", r.gen) == plan.gen:
                # a collective failed before the control plane heard of a loss: give the
                # loss a moment to arrive, else form the same members again
                asyncio.get_running_loop().call_later(0.5, self._reform_if_stuck, record, plan.gen)
        elif kind == "done":
            record.step, record.epoch = r.step, int(r.data.get("epoch", record.epoch))
            record.loss = r.data.get("loss", record.loss)
            if r.data.get("checkpoint") is not None:
                record.checkpoint = r.data["checkpoint"]
            self._finish(record, RunState.COMPLETED, f"{r.step} steps")
        elif kind == "error":
            record.errors[r.name] = {
                "error": str(r.data.get("error", "")),
                "traceback": str(r.data.get("traceback", "")),
            }
            self._finish(record, RunState.FAILED, f"{r.name}: {r.data.get('error')}")

    def _progress(self, record: Record, r: Report) -> None:
        d = r.data
        now = time.time()
        if r.step > record.step:
            record.last_advance = now
            rate = d.get("steps_per_s") or 0
            record.steps_per_s = float(rate)
            if rate:
                record.step_times = ([*record.step_times, 1.0 / float(rate)])[-50:]
        record.step, record.epoch, record.loss = r.step, int(d.get("epoch", 0)), d.get("loss")
        point = {
            "step": r.step,
            "time": r.time,
            "loss": d.get("loss"),
            "steps_per_s": d.get("steps_per_s"),
            "samples_per_s": d.get("samples_per_s"),
            "world_size": d.get("world"),
        }
        if "lagging" in d:  # rank 0's view: failing saves, or saves queued behind a slow one
            record.lagging = bool(d["lagging"])
        if r.step % record.history_every == 0:
            record.history.append(point)
        _trim_history(record)

    def _evaluated(self, record: Record, r: Report) -> None:
        """An evaluation (run in the background on rank 0) finished: its result goes
        into the history at the step whose weights it evaluated."""
        step = int(r.data.get("eval_step", r.step))
        result: dict[str, Any] = {"eval_time": r.time}  # when it finished
        if "eval" in r.data:
            result["eval"] = r.data["eval"]
        if "eval_error" in r.data:
            result["eval_error"] = r.data["eval_error"]
        for point in reversed(record.history):
            if point["step"] == step:
                point.update(result)
                return
            if point["step"] < step:
                break
        point = {"step": step, "time": r.time, "loss": None, "steps_per_s": None}
        point.update(samples_per_s=None, world_size=None, **result)
        bisect.insort(record.history, point, key=lambda p: p["step"])
        _trim_history(record)

    def _resumed(self, record: Record, r: Report) -> None:
        for name, join in list(record.admitting.items()):
            if join["generation"] <= r.gen:  # the joiner trained in this generation
                del record.admitting[name]
                join = {
                    **join,
                    "trained_at": r.time,
                    "rejoin_s": round(r.time - join["arrived_at"], 3),
                }
                record.joins.append(join)
        pending, plan = record.pending, record.plan
        if pending is None or plan is None or r.gen != plan.gen:
            return
        record.pending = None
        lost = max(0, int(pending["highest_step"]) - int(r.data.get("synced_step", r.step)))
        recovery = {
            "cause": pending["cause"],
            "detected_at": pending["detected_at"],
            "resumed_at": r.time,
            "rto_s": round(r.time - pending["detected_at"], 4),
            "steps_lost": lost,
            "workers_before": pending["workers_before"],
            "workers_after": len(plan.members),
            "how": plan.how,
            "generation": plan.gen,
            "step": r.step,
        }
        record.recoveries.append(recovery)
        record.step = max(record.step, r.step)
        record.last_advance = time.time()
        self._publish(
            record,
            RecoveryCompleted(
                cause=recovery["cause"],
                rto_s=recovery["rto_s"],
                steps_lost=lost,
                workers_before=recovery["workers_before"],
                workers_after=recovery["workers_after"],
            ),
        )
        self._set_state(record, RunState.RUNNING, f"recovered with {len(plan.members)} workers")
        self._update_health(record)

    def _reform_if_stuck(self, record: Record, gen: int) -> None:
        plan = record.plan
        if record.finished or plan is None or plan.gen != gen:
            return
        members = [m for m in plan.members if m in record.actors]
        if len(members) >= record.options.min_workers and members:
            self._new_plan(record, members, how="form")

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


def _trim_history(record: Record) -> None:
    """Keep a run's history within :data:`_HISTORY_MAX` points: every other progress
    point goes (and later ones are kept half as often); evaluations, sparse and
    wanted, stay unless they alone fill half of it, then every other one goes too."""
    if len(record.history) <= _HISTORY_MAX:
        return
    evals = [p for p in record.history if "eval_time" in p]
    progress = [p for p in record.history if "eval_time" not in p][::2]
    record.history_every *= 2
    if len(evals) > _HISTORY_MAX // 2:
        evals = evals[::-2][::-1]  # the newest stays
    record.history = sorted(progress + evals, key=lambda p: p["step"])
