"""The rank actor: one long-lived training thread per worker and run.

The coordinator starts it through the worker handler ``ft_train_start``
(:func:`start_rank`, registered by :mod:`._plugin`) and sends it plans
(``ft_train_deliver``: :func:`deliver`); it answers with reports on the scheduler's
event log. Its life::

    warm up (build model, optimizer, data) ─► report ready
    for each plan: form or switch groups ─► agree on the newest committed step
        ─► verify ─► train until done, or until a newer plan interrupts, or a peer fails

A step is committed once its gradient reduction completed on this rank; after any
change of group the ranks agree on the newest committed step (MAX over ranks), and a
rank that has it sends its state to those that do not. So no committed step is lost,
and the samples of a committed step are never taken again.

This module owns the RPC entry points, this worker's actors (:data:`_ACTORS`), and
:class:`RankActor`: the thread, its plans and its groups. The rank's parts, each
given what it needs, are its own modules: :class:`~._report.RankReporter` (log,
phase, reports), :class:`~._collectives.Collectives`,
:class:`~._held_state.HeldState`, :class:`~._agreement.StateAgreement`,
:class:`~._checkpoints.RankCheckpoints` and :class:`~._steps.StepLoop`.
"""

from __future__ import annotations

import atexit
import collections
import threading
import traceback
from typing import TYPE_CHECKING, Any

from ft_notebook.exceptions import RendezvousTimeout
from ft_notebook.train.protocol import Phase, Plan
from ft_notebook.train.rank._agreement import StateAgreement
from ft_notebook.train.rank._checkpoints import RankCheckpoints
from ft_notebook.train.rank._collectives import Collectives
from ft_notebook.train.rank._generations import NotMet, RankGenerations
from ft_notebook.train.rank._groups import (
    Generation,
    GroupTimeouts,
    Interrupted,
    PeerFailed,
    Waker,
    abort_nccl,
)
from ft_notebook.train.rank._held_state import HeldState
from ft_notebook.train.rank._report import RankReporter
from ft_notebook.train.rank._steps import StepLoop
from ft_notebook.train.report_kinds import ErrorData, PeerFailedData, ReadyData, SyncedData

if TYPE_CHECKING:
    from ft_notebook.train.rank._trainer import Trainer
    from ft_notebook.train.spec import FitSpec

#: Rank actors of this worker process, by run name.
_ACTORS: dict[str, RankActor] = {}
_LOCK = threading.Lock()
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
        actor = RankActor(spec, run, name, first, incarnation, dask_worker)
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


class RankActor(threading.Thread):
    """One rank of one run: its plans, and the loop that trains by them.

    It wires the rank's parts: a :class:`~._report.RankReporter` (log, phase,
    reports) and :class:`~._collectives.Collectives` from the start; once the model is
    built, the :class:`~._held_state.HeldState`, its
    :class:`~._checkpoints.RankCheckpoints`, the
    :class:`~._agreement.StateAgreement` of each generation and the
    :class:`~._steps.StepLoop` that trains it. It owns the plans and the groups: each
    plan's generation is established here, then agreed on, verified and trained.
    """

    def __init__(
        self, spec: bytes, run: str, name: str, first: bool, incarnation: str, worker: Any
    ) -> None:
        super().__init__(name=f"ft-notebook-rank-{run}", daemon=True)
        self.spec_bytes, self.run_name, self.worker_name = spec, run, name
        self.first = first  # started with the run (not a joiner): may resume from the store
        self.incarnation = incarnation  # which submission of the run this actor belongs to
        self.waker = Waker()
        self.waker.interrupted = self.plan_due
        self._plan: Plan | None = None
        self._plan_lock = threading.Lock()
        self.current: Plan | None = None
        self.training = False  # in a generation's steps (not forming or agreeing)
        self.reporter = RankReporter(run, name, incarnation, worker, self._position)
        self.collectives = Collectives(self.waker)
        # built in the actor's thread, dropped when it ends (the model, data and GPU go)
        self.generations: RankGenerations | None = None
        self.held: HeldState | None = None
        self.checkpoints: RankCheckpoints | None = None
        self.agreement: StateAgreement | None = None
        self.steps: StepLoop | None = None
        self.final: bytes | None = None  # rank 0's state once the run completed
        self._step_at_end = -1  # the committed step when the parts were dropped

    # -- what the RPCs and the exit handler read

    @property
    def gen(self) -> Generation | None:
        return self.collectives.gen

    @property
    def step(self) -> int:
        """Committed steps; -1: only the factory's state, not yet agreed."""
        return self._step_at_end if self.held is None else self.held.step

    @property
    def trainer(self) -> Trainer | None:
        return None if self.held is None else self.held.trainer

    @property
    def phase(self) -> Phase:
        return self.reporter.phase

    @property
    def lines(self) -> collections.deque[str]:
        return self.reporter.lines

    def _position(self) -> tuple[int, int]:
        gen = self.collectives.gen  # read once: a commit reports from the writer thread
        return (gen.gen if gen is not None else 0), self.step

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.worker_name,
            "phase": self.reporter.phase.value,
            "since": self.reporter.phase_since,
            "step": self.step,
            "gen": self.gen.gen if self.gen is not None else 0,
            "alive": self.is_alive(),
        }

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

    def plan_due(self) -> bool:
        """A newer plan that stops what the rank is doing now: any, but one that only
        admits joiners (``switch_at``) once the rank, training, has committed the
        steps before it; it never stops a group forming or agreeing on its state
        (every member of that group treats it so, and they all train to the
        boundary). A rank past it that meets a peer still waiting in a collective of
        the next step interrupts that one too."""
        if not self.newer_plan():
            return False
        plan, held = self._plan, self.held
        if plan is None or not plan.switch_at or held is None:
            return True
        return self.training and held.step >= plan.switch_at

    def _next_plan(self) -> Plan:
        while not self.newer_plan():
            self.waker.event.clear()
            if self.newer_plan():
                break
            self.waker.event.wait(1.0)
        assert self._plan is not None
        self.current = self._plan
        return self._plan

    # -- main

    def run(self) -> None:
        try:
            self._main()
        except BaseException as e:
            self.reporter.set_phase(Phase.FAILED)
            text = traceback.format_exc()
            self.reporter.log(text)
            self.reporter.report(ErrorData(error=f"{type(e).__name__}: {e}", traceback=text))
        finally:
            if self.generations is not None:
                self.generations.leave()
            if self.checkpoints is not None:
                self.checkpoints.close()
            # kept for logs() and final_state() only: let the model, data and GPU go
            self._step_at_end = self.step
            self.held, self.checkpoints, self.agreement, self.steps = None, None, None, None

    def _main(self) -> None:
        import_lazy_torch()
        import cloudpickle
        import torch

        from ft_notebook.train.rank._trainer import Trainer

        self.spec: FitSpec = cloudpickle.loads(self.spec_bytes)
        spec, log = self.spec, self.reporter.log
        device = _device(spec.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)  # NCCL groups and new tensors go to this GPU
        backend = "nccl" if device.type == "cuda" else "gloo"
        self.generations = RankGenerations(
            self.collectives,
            self.waker,
            self.worker_name,
            backend,
            GroupTimeouts(spec.rendezvous_timeout_s, spec.collective_timeout_s),
            self.reporter,
        )
        if spec.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        held = self.held = HeldState(Trainer(spec, device))
        self.checkpoints = RankCheckpoints(spec, self.run_name, held, self.reporter)
        self.agreement = StateAgreement(self.collectives, held, self.checkpoints, self.reporter)
        self.steps = StepLoop(
            spec,
            held,
            self.collectives,
            self.agreement,
            self.checkpoints,
            self.reporter,
            self.plan_due,
        )
        if self.first and spec.resume:
            self.checkpoints.resume()
        self.reporter.set_phase(Phase.READY)
        log(f"ready on {device} ({held.trainer.numel} parameters, {held.trainer.size} samples)")
        self.reporter.report(ReadyData(device=str(device)))
        while True:
            plan = self._next_plan()
            if plan.stop:
                log(f"stopping: {plan.stop}")
                return
            if self.worker_name not in plan.members:
                self.reporter.set_phase(Phase.PARKED)
                log(f"not in generation {plan.gen}: waiting")
                continue
            try:
                self._generation(plan)
            except Interrupted:
                self._drop_buffers()
                continue
            except (PeerFailed, RendezvousTimeout) as e:
                self._drop_buffers()
                self.reporter.set_phase(Phase.PEER_FAILED)
                log(str(e))
                # a failed rendezvous: who its peers may blame
                absent = e.absent if isinstance(e, NotMet) else None
                self.reporter.report(PeerFailedData(error=str(e), plan=plan.gen, absent=absent))

    def _generation(self, plan: Plan) -> None:
        """Establish the plan's generation, agree on its state and train it to the end;
        raises Interrupted, PeerFailed or RendezvousTimeout."""
        assert self.agreement is not None
        assert self.steps is not None
        assert self.generations is not None
        gen = self.generations.establish(plan)
        self.agreement.sync(plan.committed)
        self.agreement.verify(f"generation {plan.gen} formed")
        self.reporter.report(
            SyncedData(world=gen.world, rank=gen.rank, how=plan.how, verified=True)
        )
        if plan.prepare and 1 < gen.world <= self.spec.survivor_groups_max_world:
            self.generations.prepare_survivors(plan, gen)
        self.training = True
        try:
            self.steps.train(plan)
        finally:
            self.training = False
        final = self.steps.finish()
        if final is not None:  # rank 0's
            self.final = final

    def _drop_buffers(self) -> None:
        """An abandoned collective may still complete into its buffer: never reuse it."""
        if self.held is not None:
            self.held.trainer.drop_buffers()


def _device(setting: str) -> Any:
    import torch

    if setting == "auto":
        setting = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(setting)
    if device.type == "cuda" and device.index is None:
        # "cuda" is this worker's current GPU; set_device needs it by index
        device = torch.device("cuda", torch.cuda.current_device())
    return device
