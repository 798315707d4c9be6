"""The rank actor: one long-lived training thread per worker and run.

The coordinator starts it through the worker's ``run`` RPC (:func:`start_rank`) and
sends it plans (:func:`deliver`); it answers with reports on the scheduler's event
log. Its life::

    warm up (build model, optimizer, data) ─► report ready
    for each plan: form or switch groups ─► agree on the newest committed step
        ─► train until done, or until a newer plan interrupts, or a peer fails

A step is committed once its gradient reduction completed on this rank; after any
change of group the ranks agree on the newest committed step (MAX over ranks), and a
rank that has it sends its state to those that do not. So no committed step is lost,
and the samples of a committed step are never taken again.
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
import traceback
from typing import Any

from ft_notebook.exceptions import RendezvousTimeout
from ft_notebook.train._durable import DurableCheckpoints
from ft_notebook.train._eval import BackgroundEval
from ft_notebook.train._groups import (
    Generation,
    Interrupted,
    PeerFailed,
    Waker,
    abort_nccl,
    form_interruptibly,
    make_group,
)
from ft_notebook.train._protocol import REPORT_TOPIC, Plan, Report, plain
from ft_notebook.train._rank_state import RankState
from ft_notebook.train._verify import StateCheck

logger = logging.getLogger("ft_notebook.train.rank")

#: Rank actors of this worker process, by run name.
_ACTORS: dict[str, RankActor] = {}
_LOCK = threading.Lock()
_PROGRESS_EVERY_S = 0.25
#: Finished actors kept per worker for their logs and final states.
_KEEP_FINISHED = 8
_TORCH_IMPORTS = threading.Lock()


def import_lazy_torch() -> None:
    """Import what torch would otherwise import on first use, once, before a run's
    threads exist.

    An optimizer's first ``state_dict``, ``zero_grad`` or ``step`` imports
    ``torch._dynamo`` (a second or so of circular imports). When two threads of a rank
    make that first use at once (the step and a checkpoint's ``state_dict``), the
    import system raises ``_DeadlockError`` or hands one of them the half-built module:
    drills on a plain LocalCluster, whose workers do not preload torch, failed at step 0
    that way. The lock keeps two actors starting on one worker from racing the same way.
    """
    with _TORCH_IMPORTS:
        import torch._dynamo
        import torch.optim  # noqa: F401


@atexit.register  # before CUDA's own exit handlers, as _groups does for retired groups
def _abort_live_nccl_groups_at_exit() -> None:
    """A worker that exits while a run trains: its live NCCL communicators must end
    while CUDA is still up, or their destructors terminate the process."""
    with _LOCK:
        gens = [a.gen for a in _ACTORS.values() if a.gen is not None]
    abort_nccl([g for gen in gens if gen.backend == "nccl" for g in gen.groups()])


# ---- RPC entry points (run on the worker's event loop: they must return at once)


def start_rank(
    spec: bytes, run: str, name: str, first: bool, incarnation: str, dask_worker: Any = None
) -> str:
    with _LOCK:
        actor = _ACTORS.get(run)
        if actor is not None and actor.is_alive():
            if actor.incarnation == incarnation:
                return "running"
            # an earlier run of this name (cancelled, failed) that has not stopped yet
            stop = Plan(run, 1 << 30, (), ("", 0), stop="replaced", incarnation=actor.incarnation)
            actor.offer(stop)
        finished = [r for r, a in _ACTORS.items() if not a.is_alive()]
        for old in finished[: max(0, len(finished) - _KEEP_FINISHED)]:
            del _ACTORS[old]  # their logs and final states go, oldest first
        actor = RankActor(spec, run, name, first, dask_worker)
        actor.incarnation = incarnation
        _ACTORS[run] = actor
    actor.start()
    return "started"


def deliver(run: str, plan: dict[str, Any], dask_worker: Any = None) -> str:
    actor = _ACTORS.get(run)
    the_plan = Plan.from_wire(plan)
    if actor is None or not actor.is_alive() or actor.incarnation != the_plan.incarnation:
        return "no-actor"
    actor.offer(the_plan)
    return "delivered"


def rank_state(run: str, dask_worker: Any = None) -> str:
    """The actor's phase as JSON (the scheduler does not deserialize richer results)."""
    import json

    actor = _ACTORS.get(run)
    return json.dumps(None if actor is None else actor.describe())


def rank_logs(run: str, dask_worker: Any = None) -> str:
    actor = _ACTORS.get(run)
    return "" if actor is None else "\n".join(actor.lines)


def final_state(run: str, dask_worker: Any = None) -> bytes | None:
    actor = _ACTORS.get(run)
    return None if actor is None else actor.final


# ---- the actor


class RankActor(RankState, threading.Thread):
    def __init__(self, spec: bytes, run: str, name: str, first: bool, worker: Any) -> None:
        super().__init__(name=f"ft-notebook-rank-{run}", daemon=True)
        self.spec_bytes, self.run_name, self.worker_name = spec, run, name
        self.first = first  # started with the run (not a joiner): may resume from the store
        self.incarnation = ""  # which submission of the run this actor belongs to
        self.worker = worker
        self.lines: collections.deque[str] = collections.deque(maxlen=2000)
        self.waker = Waker()
        self.waker.interrupted = self.newer_plan
        self._plan: Plan | None = None
        self._plan_lock = threading.Lock()
        self.current: Plan | None = None
        self.gen: Generation | None = None
        self.step = -1  # committed steps; -1: only the factory's state, not yet agreed
        self.phase, self.phase_since = "warming", time.time()
        self.skip: set[int] = set()  # steps skipped for non-finite gradients
        self.nonfinite_total = 0
        self.final: bytes | None = None
        self.durable: Any = None
        self.trainer: Any = None  # built in the actor's thread
        self._last_progress = 0.0
        self._last_loss: Any = None
        self._window: tuple[float, int] | None = None
        self.evaluator: BackgroundEval | None = None  # rank 0's, once it evaluates
        self.check = StateCheck()  # the state this rank can vouch for

    # -- plans

    def offer(self, plan: Plan) -> None:
        with self._plan_lock:
            if self._plan is None or plan.gen > self._plan.gen or plan.stop:
                self._plan = plan
        self.waker.event.set()

    def newer_plan(self) -> bool:
        plan = self._plan
        return plan is not None and (
            self.current is None or plan.gen > self.current.gen or bool(plan.stop)
        )

    def _next_plan(self) -> Plan:
        while not self.newer_plan():
            self.waker.event.clear()
            if self.newer_plan():
                break
            self.waker.event.wait(1.0)
        assert self._plan is not None
        self.current = self._plan
        return self._plan

    # -- reporting

    def log(self, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} [{self.worker_name}] {message}"
        self.lines.append(line)
        logger.info(line)

    def report(self, kind: str, **data: Any) -> None:
        current = self.gen  # read once: a checkpoint's commit reports from the writer thread
        gen = current.gen if current is not None else 0
        data = {**data, "incarnation": self.incarnation}
        msg = Report(self.run_name, self.worker_name, kind, gen, self.step, time.time(), data)
        try:
            self.worker.log_event(REPORT_TOPIC, msg.to_wire())
        except Exception:  # the worker is closing: nobody is left to tell
            logger.debug("could not report %s", kind, exc_info=True)

    def set_phase(self, phase: str) -> None:
        self.phase, self.phase_since = phase, time.time()

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.worker_name,
            "phase": self.phase,
            "since": self.phase_since,
            "step": self.step,
            "gen": self.gen.gen if self.gen is not None else 0,
            "alive": self.is_alive(),
        }

    # -- main

    def run(self) -> None:
        try:
            self._main()
        except BaseException as e:
            self.set_phase("failed")
            text = traceback.format_exc()
            self.log(text)
            self.report("error", error=f"{type(e).__name__}: {e}", traceback=text)
        finally:
            if self.gen is not None:
                self.gen.retire(self._timeout())
            if self.durable is not None:
                self.durable.close()
            # kept for logs() and final_state() only: let the model, data and GPU go
            self.gen, self.trainer, self.durable = None, None, None

    def _timeout(self) -> float:
        return float((getattr(self, "spec", None) and self.spec.group_timeout_s) or 30.0)

    def _main(self) -> None:
        import_lazy_torch()
        import cloudpickle
        import torch

        from ft_notebook.train._trainer import Trainer

        self.spec = cloudpickle.loads(self.spec_bytes)
        device = _device(self.spec.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)  # NCCL groups and new tensors go to this GPU
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        if self.spec.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        self.trainer = Trainer(self.spec, device)
        spec = self.spec
        self.durable = DurableCheckpoints(
            spec.store_url,
            spec.store_keep,
            self.run_name,
            spec.checkpoint_every,
            on_commit=lambda step: self.report("checkpoint", checkpoint_step=step),
        )
        if self.first and self.spec.resume:
            self._resume()
        self.set_phase("ready")
        self.log(
            f"ready on {device} ({self.trainer.numel} parameters, {self.trainer.size} samples)"
        )
        self.report("ready", device=str(device))
        while True:
            plan = self._next_plan()
            if plan.stop:
                self.log(f"stopping: {plan.stop}")
                return
            if self.worker_name not in plan.members:
                self.set_phase("parked")
                self.log(f"not in generation {plan.gen}: waiting")
                continue
            try:
                self.gen = self._establish(plan)
                self._sync()
                self._verify(f"generation {plan.gen} formed")
                self.report(
                    "synced", world=self.gen.world, rank=self.gen.rank, how=plan.how, verified=True
                )
                if plan.prepare and 1 < self.gen.world <= self.spec.survivor_groups_max_world:
                    self.gen.prepare_survivors(
                        self._store(plan.store), self._timeout(), self._prepared_reporter()
                    )
                if self._train():
                    self._finish()
            except Interrupted:
                self._drop_buffers()
                continue
            except (PeerFailed, RendezvousTimeout) as e:
                self._drop_buffers()
                self.set_phase("peer-failed")
                self.log(str(e))
                self.report("peer-failed", error=str(e), plan=plan.gen)

    def _prepared_reporter(self) -> Any:
        """Report "prepared" for this generation, even when the build ends after it."""
        assert self.gen is not None
        gen_no = self.gen.gen

        def report() -> None:
            self.report("prepared", prepared_gen=gen_no)

        return report

    def _drop_buffers(self) -> None:
        """An abandoned collective may still complete into its buffer: never reuse it."""
        if getattr(self, "trainer", None) is not None:
            self.trainer._flat = self.trainer._total = None

    def _store(self, address: tuple[str, int]) -> Any:
        """A new client of the rendezvous store. One per rendezvous and per survivor
        build: a client holds its lock while it waits for a key, so an abandoned
        rendezvous must not share one with the next."""
        import datetime

        import torch.distributed as dist

        return dist.TCPStore(  # type: ignore[attr-defined]
            address[0],
            address[1],
            None,
            False,
            timeout=datetime.timedelta(seconds=self._timeout()),
        )

    def _establish(self, plan: Plan) -> Generation:
        old = self.gen
        rank, world = plan.members.index(self.worker_name), len(plan.members)
        if plan.how == "survive" and old is not None and old.gen == plan.base and plan.lost:
            group = old.survivor_group(plan.lost)
            if group is not None:
                self.log(
                    f"generation {plan.gen}: switched to the prepared group without {plan.lost}"
                )
                old.survivors.pop(plan.lost, None)
                old.retire(self._timeout())
                return Generation(
                    plan.prefix, plan.gen, plan.members, self.worker_name, group, self.backend
                )
            raise PeerFailed(f"no prepared group of generation {plan.base} without {plan.lost}")
        if old is not None:
            old.retire(self._timeout())
            self.gen = None
        self.set_phase("rendezvous")
        store = self._store(plan.store)
        prefix = plan.prefix
        group = form_interruptibly(
            self.waker,
            lambda: make_group(store, prefix, rank, world, self.backend, self._timeout()),
            f"rendezvous of generation {plan.gen}",
            self._timeout(),
        )
        self.log(f"generation {plan.gen}: rank {rank} of {world}")
        return Generation(
            plan.prefix, plan.gen, plan.members, self.worker_name, group, self.backend
        )

    # -- training

    def _train(self) -> bool:
        """Train this generation to the end (True), or raise Interrupted / PeerFailed."""
        gen, trainer = self.gen, self.trainer
        assert gen is not None
        parts = self.current.parts if self.current is not None else 0
        streak = 0
        synced_step, first = self.step, True
        self._window = (time.perf_counter(), self.step)
        while self.step < trainer.total_steps:
            if self.newer_plan():
                raise Interrupted("a newer plan")
            step = self.step
            if step in self.skip:
                self.step += 1
                self.check.committed(self.step, trainer)
                continue
            self.set_phase("compute")
            buffer = trainer.local_gradients(step, gen.rank, gen.world, parts)
            self.set_phase("reduce")
            self._allreduce(buffer, "SUM", f"the gradient reduction of step {step}")
            loss, ok = trainer.apply(trainer.reduce_rows(buffer))
            self.step = step + 1  # committed
            self.check.committed(self.step, trainer)
            if first and gen.rank == 0:  # the coordinator times recoveries by this
                self.report("resumed", synced_step=synced_step)
            first = False
            if ok:
                streak = 0
            else:
                streak += 1
                self.nonfinite_total += 1
                self.skip.add(step)
                if gen.rank == 0:
                    self.report("nonfinite", at_step=step, streak=streak, loss=plain(loss))
                if streak >= self.spec.nonfinite_limit:
                    self._rollback(streak)
                    streak = 0
                    continue
            self._last_loss = plain(loss)
            # not while a streak of non-finite steps goes on: a rollback must not land
            # on the state it rolls back from
            self._after_step(loss, checkpoint=streak == 0)
        return True

    def _after_step(self, loss: float, *, checkpoint: bool = True) -> None:
        gen, spec = self.gen, self.spec
        assert gen is not None
        if gen.rank != 0:
            return
        next_due = (self.step // spec.checkpoint_every + 1) * spec.checkpoint_every
        # once: the optimizer has its state now; the first save's memory is made meanwhile
        if next_due <= self.trainer.total_steps and self.durable.warm(self.trainer.state):
            self.log("preparing the first checkpoint's host memory in the background")
        if checkpoint and self.step % spec.checkpoint_every == 0:
            self._checkpoint()
        if spec.eval_fn is not None and spec.eval_every and self.step % spec.eval_every == 0:
            if self.evaluator is None:
                self.evaluator = BackgroundEval(spec.eval_fn, self.log, self.report)
            self.evaluator.start(self.step, self.trainer.model)
        now = time.perf_counter()
        if now - self._last_progress >= _PROGRESS_EVERY_S:
            start, first = self._window or (now, self.step)
            rate = (self.step - first) / (now - start) if now > start else 0.0
            self._window = (now, self.step)
            self._last_progress = now
            self.report(
                "progress",
                loss=plain(loss),
                steps_per_s=round(rate, 3),
                samples_per_s=round(rate * spec.batch_size, 1),
                world=gen.world,
                epoch=self.step // self.trainer.steps_per_epoch,
                lagging=self.durable.lagging,
            )

    def _finish(self) -> None:
        gen = self.gen
        assert gen is not None
        self._verify("the last step")  # never COMPLETED from a state nobody vouches for
        self.set_phase("done")
        if self.evaluator is not None:
            self.evaluator.join()  # bounded: a hung eval_fn does not keep the run open
        if gen.rank == 0:
            self.final = self._state_bytes()
            saved = None
            try:
                saved = self.durable.final(self.step, self.trainer.state, self._metadata())
            except Exception as e:  # the state stays on this worker: final_state()
                self.log(f"the final checkpoint failed: {e}")
            self.report(
                "done",
                checkpoint=saved,
                nonfinite_total=self.nonfinite_total,
                epoch=self.step // self.trainer.steps_per_epoch,
                loss=self._last_loss,
            )
        self.log(f"finished at step {self.step}")


def _device(setting: str) -> Any:
    import torch

    if setting == "auto":
        setting = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(setting)
    if device.type == "cuda" and device.index is None:
        # "cuda" is this worker's current GPU; set_device needs it by index
        device = torch.device("cuda", torch.cuda.current_device())
    return device
