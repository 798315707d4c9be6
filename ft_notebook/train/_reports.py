"""What the ranks report, and what the coordinator makes of it: a mixin of
:class:`~ft_notebook.train._coordinator.RunCoordinator`. Reports come through the
scheduler's event log (``log_event``); each moves the run's record on (readiness,
sync, progress and history, evaluations, checkpoints, recoveries, the end) and may
publish events or send a new plan through the coordinator.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from typing import TYPE_CHECKING, Any

from ft_notebook.events import (
    CheckpointFailed,
    RolledBack,
    RunState,
    StateRepaired,
    StepSkipped,
)
from ft_notebook.runfold import Recovery
from ft_notebook.train._protocol import REPORT_TOPIC, Plan, Report, UnknownMessage
from ft_notebook.train._record import Record

logger = logging.getLogger("ft_notebook.train._coordinator")

#: Points a run's history keeps (see :func:`_trim_history`).
_HISTORY_MAX = 2000
#: Re-forms of the same members after failed collectives before the run may fail
#: (it fails only once the step has also stood still for the stall threshold).
_REGROUPS_MIN = 3


class RunReports:
    """The coordinator's handling of rank reports."""

    runs: dict[str, Record]

    if TYPE_CHECKING:  # provided by the coordinator

        def _publish(self, record: Record, payload: Any) -> None: ...
        def _admit(self, record: Record) -> None: ...
        def _finish(self, record: Record, state: RunState, reason: str) -> None: ...
        def _set_state(self, record: Record, state: RunState, reason: str) -> None: ...
        def _update_health(self, record: Record) -> None: ...
        def stall_threshold(self, record: Record) -> float: ...
        def _new_plan(
            self,
            record: Record,
            members: list[str],
            how: str,
            lost: str | None = None,
            stop: str = "",
        ) -> Plan: ...

    def log_event(self, topic: str, msg: Any) -> None:
        if topic != REPORT_TOPIC or not isinstance(msg, dict):
            return
        try:
            report = Report.from_wire(msg)
        except UnknownMessage as e:  # never guessed at: a rank of another version?
            logger.error("a rank's report was refused: %s", e)
            return
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
            if r.data.get("verified"):
                record.verified.add(r.gen)
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
        elif kind == "state-repaired":
            record.notes.append({"kind": kind, "time": r.time, **r.data})
            self._publish(
                record,
                StateRepaired(
                    at_step=int(r.data.get("at_step", r.step)),
                    workers=tuple(str(w) for w in r.data.get("workers", [])),
                    source=str(r.data.get("source", r.name)),
                    when=str(r.data.get("when", "")),
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
                error = str(r.data.get("error", ""))
                asyncio.get_running_loop().call_later(
                    0.5, self._reform_if_stuck, record, plan.gen, r.step, error
                )
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
        recovery = Recovery(
            cause=pending["cause"],
            detected_at=pending["detected_at"],
            resumed_at=r.time,
            rto_s=round(r.time - pending["detected_at"], 4),
            steps_lost=lost,
            workers_before=pending["workers_before"],
            workers_after=len(plan.members),
            how=plan.how,
            generation=plan.gen,
            step=r.step,
            # the members checked that they went on from one state a member vouched for
            verified=plan.gen in record.verified,
        )
        record.recoveries.append(recovery)
        record.step = max(record.step, r.step)
        record.last_advance = time.time()
        self._publish(record, recovery.as_payload())  # the whole recovery: folds agree
        self._set_state(record, RunState.RUNNING, f"recovered with {len(plan.members)} workers")
        self._update_health(record)

    def _reform_if_stuck(self, record: Record, gen: int, step: int, error: str) -> None:
        """A collective failed at ``step`` and no loss followed: form the same members
        again. When they keep failing at the same step for the run's stall threshold (a
        broken interconnect, a GPU in a bad state), the run fails and says so, rather
        than re-forming for ever while it looks as if it were running."""
        plan = record.plan
        if record.finished or plan is None or plan.gen != gen:
            return
        stuck = record.regrouping
        if step < 0 and stuck is not None:
            step = stuck["step"]  # a rank that joined with no state yet: no news of progress
        if stuck is None or stuck["step"] != step:  # it got further (or rolled back)
            stuck = record.regrouping = {"step": step, "since": time.time(), "count": 0}
        stuck["count"] += 1
        waited = time.time() - stuck["since"]
        if stuck["count"] >= _REGROUPS_MIN and waited >= self.stall_threshold(record):
            self._finish(
                record,
                RunState.FAILED,
                f"the workers' collectives failed {stuck['count']} times in a row at step "
                f"{stuck['step']} over {waited:.0f} s, with no worker lost (last error: "
                f"{error or 'none given'}). Check that the workers can reach each other "
                f"(ft-notebook.cluster.interface, NCCL_DEBUG=INFO on GPUs), then go on "
                f"from the newest checkpoint with ft.fit(..., resume=True).",
            )
            return
        logger.warning(
            "run %s: a collective failed at step %s (%s); forming the same %d workers "
            "again (%d in a row)",
            record.name,
            step,
            error,
            len(plan.members),
            stuck["count"],
        )
        members = [m for m in plan.members if m in record.actors]
        if len(members) >= record.options.min_workers and members:
            self._new_plan(record, members, how="form")


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
