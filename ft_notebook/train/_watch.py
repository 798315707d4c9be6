"""Watching a run from the coordinator: progress for dashboards, and hangs that
heartbeats do not show (a rank whose step stops advancing while its heartbeats go
on). A mixin of :class:`~ft_notebook.train._coordinator.RunCoordinator`: it uses the
coordinator's control plane, calls and recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import statistics
import time
from typing import TYPE_CHECKING, Any

from ft_notebook.cluster.plugins import name_key
from ft_notebook.events import RunProgress, RunState
from ft_notebook.train import _rank
from ft_notebook.train._record import Record

logger = logging.getLogger("ft_notebook.train._coordinator")


#: A step every rank is stuck in fails the run after this many stall thresholds (one
#: stuck rank is evicted after one: the others go on without it).
_ALL_STUCK_AFTER = 3


class RunWatch:
    """The coordinator's watchdog loop (two checks a second)."""

    runs: dict[str, Record]
    control: Any

    if TYPE_CHECKING:  # provided by the coordinator

        def _publish(self, record: Record, payload: Any) -> None: ...
        async def _call(self, address: str, fn: Any, *args: Any) -> Any: ...
        def _lost(self, record: Record, names: list[str], cause: str) -> None: ...
        def _spawn(self, coro: Any) -> None: ...
        def _finish(self, record: Record, state: RunState, reason: str) -> None: ...

    # ---- hangs that heartbeats do not show

    async def _watchdog(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            for record in list(self.runs.values()):
                try:
                    if not record.finished:
                        self._publish_progress(record)
                    await self._check_stall(record)
                except Exception:
                    logger.exception("stall check of %s failed", record.name)

    # ---- progress for dashboards (about once a second, and at the end)

    def _publish_progress(self, record: Record, *, force: bool = False) -> None:
        workers = self._workers_of(record)
        what = (record.step, record.state, workers_key(workers))
        when, last = record.published
        now = time.time()
        if not force and (now - when < 1.0 or (what == last and now - when < 10.0)):
            return
        record.published = (now, what)
        total = record.options.total_steps
        eta = (total - record.step) / record.steps_per_s if total and record.steps_per_s else None
        loss = record.loss if isinstance(record.loss, (int, float)) else None
        self._publish(
            record,
            RunProgress(
                step=record.step,
                total_steps=total,
                epoch=record.epoch,
                world_size=record.world,
                loss=loss,
                samples_per_s=next(
                    (h["samples_per_s"] for h in reversed(record.history) if h["samples_per_s"]),
                    None,
                ),
                eta_s=round(eta, 1) if eta is not None and not record.finished else None,
                state=record.state.value,
                workers=workers,
            ),
        )

    def _workers_of(self, record: Record) -> tuple[dict[str, Any], ...]:
        rows = {r["name"]: r for r in self.control.rows()}
        plan = record.plan
        members = set(plan.members) if plan is not None and not plan.stop else set()
        out = []
        for name in sorted(record.seen | members, key=name_key):
            row = rows.get(name, {})
            if row.get("state") in ("lost", "hung") or name not in record.actors:
                state = str(row.get("state") or "lost")
                state = "lost" if state == "running" else state  # a new process, no rank yet
            elif record.finished:
                state = "done"
            elif name in members:
                state = "training"
            else:
                state = "joining"
            out.append(
                {
                    "name": name,
                    "state": state,
                    "heartbeat_age_s": row.get("heartbeat_age_s"),
                    "rss": row.get("rss"),
                    "gpu": row.get("gpu_health"),
                    "restarts": row.get("restarts", 0),
                }
            )
        return tuple(out)

    def stall_threshold(self, record: Record) -> float:
        o = record.options
        if len(record.step_times) < 5:
            return o.first_steps_floor_s
        return max(o.stall_min_s, o.stall_factor * statistics.median(record.step_times))

    async def _check_stall(self, record: Record) -> None:
        plan = record.plan
        active = (RunState.RUNNING, RunState.RECOVERING)
        if record.state not in active or plan is None or plan.stop:
            return
        threshold = self.stall_threshold(record)
        if time.time() - record.last_advance < threshold:
            return
        states = {}
        for name in plan.members:
            address = record.actors.get(name)
            if address is not None:
                with contextlib.suppress(Exception):
                    states[name] = json.loads(
                        await asyncio.wait_for(
                            self._call(address, _rank.rank_state, record.name), 5
                        )
                    )
        stuck = [n for n, s in states.items() if s and s.get("phase") == "compute"]
        if not stuck:
            return
        if len(stuck) == len(plan.members):  # no healthy rank to go on with
            waited = time.time() - record.last_advance
            if waited >= _ALL_STUCK_AFTER * threshold:
                at = sorted({str(states[n].get("step")) for n in stuck})  # theirs: newer
                self._finish(
                    record,
                    RunState.FAILED,
                    f"every worker ({', '.join(stuck)}) has been computing step "
                    f"{' or '.join(at)} for {waited:.0f} s, {_ALL_STUCK_AFTER}x the run's stall "
                    f"threshold: the training code or its data loading hangs on all of "
                    f"them (a deadlock, a hung filesystem). Their logs (run.logs()) say "
                    f"where; fix that, then go on from the newest checkpoint with "
                    f"ft.fit(..., resume=True).",
                )
            return
        for name in stuck:
            address = record.actors.get(name)
            logger.warning(
                "run %s: %s has not finished step %s in %.0f s: evicting it",
                record.name,
                name,
                record.step,
                threshold,
            )
            if address is not None:
                record.actors.pop(name, None)
                record.ready.discard(name)
                self._lost(record, [name], f"step not advancing for {threshold:.0f} s")
                self._spawn(self.control.evict(address))
        record.last_advance = time.time()


def workers_key(workers: tuple[dict[str, Any], ...]) -> tuple[tuple[str, str], ...]:
    """What of the workers makes a new progress event worth publishing."""
    return tuple((str(w["name"]), str(w["state"])) for w in workers)
