"""A run's record in the coordinator: its options and everything known about it.

:meth:`Record.info` is what a :class:`~ft_notebook.train.Run` handle in any kernel
reads (plain, JSON-able values).

The coordinator's parts (:mod:`._plugin`) share a run's record, and each keeps
its own book in it: ``members`` (:class:`MemberBook`: :mod:`._membership` and
:mod:`._evictions`), ``gens`` (:class:`GenerationBook`: :mod:`._generations`),
``recovery`` (:class:`RecoveryBook`: :mod:`._recoveries`), ``progress``
(:class:`ProgressBook`: :mod:`._progress_reports`) and ``noted`` (:class:`NoteBook`:
:mod:`._notes`). The few fields every part reads stay on the record itself:
``plan`` (:mod:`._generations`), ``finished_at`` and ``errors`` (:mod:`._end`),
``highest_step`` (:mod:`._reports`); ``step``, ``epoch``, ``loss`` and
``last_advance`` move on with the reports that carry them (what the ranks said).

What the run *is*, as everyone else sees it, is not kept here but in ``view``: the
fold of the events the coordinator published (state, health, reason, progress,
recoveries) and of the checkpoints the ranks reported, by the same
:class:`~ft_notebook.runfold.RunView` the dashboards, the REST API and the panel
fold the run's journal with. :mod:`._status` is its one writer, and only by
publishing, so ``info()`` and every view cannot disagree on a fact.
"""

from __future__ import annotations

import collections
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ft_notebook.events import Health, RunState
from ft_notebook.runfold import RunView
from ft_notebook.train.protocol import Plan
from ft_notebook.train.spec import RunOptions


@dataclass
class MemberBook:
    """Which workers have rank actors of the run, and how they came and went: kept by
    :mod:`._membership`; ``evicted``, ``retired`` and ``absent`` by :mod:`._evictions`.
    A member lost leaves ``actors`` and ``ready`` through one rule,
    :meth:`~._generations.Generations.drop`, whoever saw it go: the control plane's
    news (:mod:`._membership`), a plan that found no actor (:mod:`._generations`), a
    hung rank (:mod:`._stall`); an eviction (:mod:`._evictions`) also forgets it as a
    joiner."""

    actors: dict[str, str] = field(default_factory=dict)  # worker name -> address
    ready: dict[str, float] = field(default_factory=dict)  # worker -> when its rank was ready
    seen: set[str] = field(default_factory=set)  # every worker that had a rank of the run
    arrivals: dict[str, float] = field(default_factory=dict)  # joiners: when they came
    admitting: dict[str, dict[str, Any]] = field(default_factory=dict)  # joiners not trained yet
    target_world: int = 0  # the workers the run began with
    resumed_from: int | None = None  # the checkpoint step a resume=True run began at
    #: Members taken out of the run for not meeting their peers: name -> why.
    evicted: dict[str, str] = field(default_factory=dict)
    #: Evicted rank actors (name -> address): the stop plan at the end goes to them too.
    retired: dict[str, str] = field(default_factory=dict)
    #: Generation -> how often each member was reported absent from its rendezvous.
    absent: dict[int, collections.Counter[str]] = field(default_factory=dict)


@dataclass
class GenerationBook:
    """What the ranks said of each generation, and its sizes: :mod:`._generations`."""

    world: int = 0  # the world size of the newest generation that trained
    parts: int = 0  # the largest world size so far: each step's batch is cut into as many
    synced: dict[int, set[str]] = field(default_factory=dict)
    #: Generations whose members checked that they hold one vouched-for state.
    verified: set[int] = field(default_factory=set)
    prepared: dict[int, set[str]] = field(default_factory=dict)


@dataclass
class RecoveryBook:
    """Losses and their recoveries: ``pending`` is opened by :mod:`._generations`;
    the rest, and closing ``pending``, is :mod:`._recoveries`. The recoveries completed
    are events: the record's ``view`` holds them."""

    pending: dict[str, Any] | None = None  # a recovery under way
    joins: list[dict[str, Any]] = field(default_factory=list)  # joiners once they trained
    #: Re-forms of the same members after collectives failed at one step with no
    #: loss: {"step", "since" (the first), "count" (since the last eviction), "failures"}.
    regrouping: dict[str, Any] | None = None


@dataclass
class ProgressBook:
    """Rank 0's progress: written by :mod:`._progress_reports`, ``published`` by
    :mod:`._publisher`."""

    history: list[dict[str, Any]] = field(default_factory=list)
    history_every: int = 1
    steps_per_s: float = 0.0
    step_times: list[float] = field(default_factory=list)
    #: A robust aggregator: worker -> steps its gradient lay far from the aggregate, and
    #: steps aggregated with the mean for too few workers.
    suspects: dict[str, int] = field(default_factory=dict)
    mean_steps: int = 0
    published: tuple[float, Any] = (0.0, None)  # when, and what, progress was last published


@dataclass
class NoteBook:
    """Skipped steps, rollbacks, repairs and checkpoints: :mod:`._notes` (``lagging``
    also from rank 0's progress, :mod:`._progress_reports`)."""

    notes: list[dict[str, Any]] = field(default_factory=list)  # nonfinite, rollback, repairs
    nonfinite: int = 0
    lagging: bool = False
    #: Seconds each newest checkpoint held training (from rank 0's reports).
    checkpoint_costs: list[float] = field(default_factory=list)
    #: checkpoint_every="auto": the newest plan rank 0 made.
    checkpoint_plan: dict[str, Any] | None = None


@dataclass
class Record:
    """One run in the coordinator: who it is, where it stands, and one book per part
    of the coordinator that keeps it."""

    name: str
    spec: bytes
    options: RunOptions
    #: What the run's events say of it, folded as every other view folds them: the
    #: one place its state, health, reason and everything ``info()`` shows of its
    #: progress live. Only :mod:`._status` moves it, by publishing an event (and the
    #: checkpoints the ranks report).
    view: RunView = field(default_factory=RunView)
    plan: Plan | None = None  # ._generations
    step: int = 0
    highest_step: int = 0  # ._reports
    epoch: int = 0
    loss: float | str | None = None
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None  # with errors: ._end
    last_advance: float = field(default_factory=time.time)  # when the step last moved
    errors: dict[str, dict[str, str]] = field(default_factory=dict)
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    members: MemberBook = field(default_factory=MemberBook)
    gens: GenerationBook = field(default_factory=GenerationBook)
    recovery: RecoveryBook = field(default_factory=RecoveryBook)
    progress: ProgressBook = field(default_factory=ProgressBook)
    noted: NoteBook = field(default_factory=NoteBook)

    @property
    def state(self) -> RunState:
        return self.view.state or RunState.PENDING  # None: its start not folded yet

    @property
    def health(self) -> Health:
        return self.view.health or Health.HEALTHY

    @property
    def reason(self) -> str:
        return self.view.reason

    @property
    def finished(self) -> bool:
        return self.state.finished

    def info(self) -> dict[str, Any]:
        """The run as its events tell it (the fold the dashboards, the REST API and the
        panel read too), and what only the coordinator knows (members, history,
        errors, notes)."""
        plan, view = self.plan, self.view
        costs = sorted(self.noted.checkpoint_costs)
        return {
            "name": self.name,
            "incarnation": self.incarnation,
            "state": self.state.value,
            "health": self.health.value,
            "reason": self.reason,
            "step": view.step or 0,
            "total_steps": self.options.total_steps,
            "epoch": view.epoch or 0,
            "loss": view.loss,
            "world_size": view.world_size or 0,
            "members": list(plan.members) if plan is not None else [],
            "generation": plan.gen if plan is not None else 0,
            "history": list(self.progress.history),
            "recoveries": [r.as_dict() for r in view.recoveries],
            "errors": dict(self.errors),
            "notes": list(self.noted.notes[-200:]),
            "checkpoint": view.checkpoint_step,
            "resumed_from": self.members.resumed_from,
            "joins": list(self.recovery.joins),
            "lagging": view.lagging,
            "nonfinite": self.noted.nonfinite,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            # what a save held training (median of the newest), and the auto plan
            "checkpoint_cost_s": costs[len(costs) // 2] if costs else None,
            "checkpoint_plan": self.noted.checkpoint_plan,
            # a robust aggregator: steps each worker's gradient was suspect in
            "suspects": dict(view.suspects),
            "mean_steps": view.mean_steps,
            # members taken out for not meeting their peers, and why
            "evicted": dict(self.members.evicted),
        }
