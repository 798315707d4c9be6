"""A run's state in the coordinator: immutable, and moved on only by :func:`~.decide.decide`.

A :class:`RunBook` is everything the coordinator knows of one run. It is frozen, and
so is every part of it: a decision returns a new book (``dataclasses.replace``) and
never changes the one it was given, so a test states a book and an input and
compares the book and actions that come out. Its mappings are plain dicts that no
code writes after they are built (:func:`put` and :func:`without` make new ones);
``tests/unit/train/test_decide.py`` checks that a decision leaves its input as it was.

Each field has one writer, named beside it; what the run *is*, as everyone else sees
it, is ``view``: the fold of the events the coordinator decided to publish (state,
health, reason, progress, recoveries) and of the checkpoints the ranks reported, by
the same :class:`~ft_notebook.runfold.RunView` the dashboards, the REST API and the
panel fold the run's journal with. Only :mod:`._status` moves it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ft_notebook.events import Health, RunState
from ft_notebook.runfold import RunView
from ft_notebook.train.protocol import Plan
from ft_notebook.train.spec import RunOptions

K = TypeVar("K")
V = TypeVar("V")


def put(mapping: Mapping[K, V], key: K, value: V) -> dict[K, V]:
    """A new dict: ``mapping`` with ``key`` set to ``value``."""
    return {**mapping, key: value}


def without(mapping: Mapping[K, V], *keys: K) -> dict[K, V]:
    """A new dict: ``mapping`` without ``keys``."""
    return {k: v for k, v in mapping.items() if k not in keys}


@dataclass(frozen=True)
class Members:
    """Which workers have rank actors of the run, and how they came and went
    (:mod:`._membership`; ``evicted``, ``retired`` and ``absent``: :mod:`._evictions`).
    A member lost leaves ``actors`` and ``ready`` by one rule,
    :func:`~._generations.drop`, whoever saw it go."""

    actors: Mapping[str, str] = field(default_factory=dict)  # worker name -> address
    ready: Mapping[str, float] = field(default_factory=dict)  # worker -> when its rank was ready
    seen: frozenset[str] = frozenset()  # every worker that had a rank of the run
    arrivals: Mapping[str, float] = field(default_factory=dict)  # joiners: when they came
    #: Joiners not trained yet: name -> {name, arrived_at, ready_at, generation}.
    admitting: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    target_world: int = 0  # the workers the run began with
    resumed_from: int | None = None  # the checkpoint step a resume=True run began at
    #: Members taken out of the run for not meeting their peers: name -> why.
    evicted: Mapping[str, str] = field(default_factory=dict)
    #: Evicted rank actors (name -> address): the stop plan at the end goes to them too.
    retired: Mapping[str, str] = field(default_factory=dict)
    #: Generation -> member -> how often it was reported absent from its rendezvous.
    absent: Mapping[int, Mapping[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Generations:
    """What the ranks said of each generation, and its sizes (:mod:`._generations`)."""

    world: int = 0  # the world size of the newest generation that trained
    parts: int = 0  # the largest world size so far: each step's batch is cut into as many
    synced: Mapping[int, frozenset[str]] = field(default_factory=dict)
    #: Generations whose members checked that they hold one vouched-for state.
    verified: frozenset[int] = frozenset()
    prepared: Mapping[int, frozenset[str]] = field(default_factory=dict)

    def can_survive(self, gen: int, members: set[str]) -> bool:
        """Whether ``members`` of generation ``gen`` can go on without one lost peer,
        with no rendezvous: each has built its groups without each other member, and
        trains (the fast path of a single loss)."""
        return (
            self.prepared.get(gen, frozenset()) >= members
            and self.synced.get(gen, frozenset()) >= members
        )


@dataclass(frozen=True)
class Pending:
    """A recovery under way: opened by a loss (:mod:`._generations`), closed when
    rank 0 commits the first step of the generation made for it (:mod:`._recoveries`)."""

    cause: str
    detected_at: float
    workers_before: int
    highest_step: int
    lost: tuple[str, ...]
    #: The generation made for it (the newest, after several losses); a plan that
    #: admits joiners may follow before it commits, and the recovery is still its.
    made: Plan | None = None


@dataclass(frozen=True)
class Regrouping:
    """Re-forms of the same members after collectives failed at one step with no loss
    (:mod:`._recoveries`): ``count`` since the last eviction, ``failures`` in all."""

    step: int
    since: float
    count: int = 0
    failures: int = 0


@dataclass(frozen=True)
class Recoveries:
    """Losses under way and joins completed (:mod:`._recoveries`; ``pending`` is
    opened by :mod:`._generations`). The recoveries completed are events: ``view``."""

    pending: Pending | None = None
    joins: tuple[Mapping[str, Any], ...] = ()  # joiners once they trained
    regrouping: Regrouping | None = None


@dataclass(frozen=True)
class Progress:
    """Rank 0's progress (:mod:`._progress_reports`; ``published``: :mod:`._publisher`)."""

    history: tuple[Mapping[str, Any], ...] = ()
    history_every: int = 1
    steps_per_s: float = 0.0
    step_times: tuple[float, ...] = ()
    #: A robust aggregator: worker -> steps its gradient lay far from the aggregate, and
    #: steps aggregated with the mean for too few workers.
    suspects: Mapping[str, int] = field(default_factory=dict)
    mean_steps: int = 0
    published: tuple[float, Any] = (0.0, None)  # when, and what, progress was last published


@dataclass(frozen=True)
class Notes:
    """Skipped steps, rollbacks, repairs and checkpoints (:mod:`._notes`; ``lagging``
    also from rank 0's progress, :mod:`._progress_reports`)."""

    notes: tuple[Mapping[str, Any], ...] = ()  # nonfinite, rollback, repairs (newest 200)
    nonfinite: int = 0
    lagging: bool = False
    #: The error of the newest checkpoint that failed, while none committed since
    #: (``""``: checkpoints are written): the run is not healthy then.
    failing: str = ""
    #: Seconds each newest checkpoint held training (from rank 0's reports).
    checkpoint_costs: tuple[float, ...] = ()
    #: checkpoint_every="auto": the newest plan rank 0 made.
    checkpoint_plan: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RunBook:
    """One run in the coordinator: who it is, where it stands, and one part per rule
    that keeps it."""

    name: str
    incarnation: str
    spec: bytes  # the pickled FitSpec; emptied when the run ends (._end)
    options: RunOptions
    started_at: float
    #: The rendezvous store of the cluster, once the run launched (._membership).
    store: tuple[str, int] = ("", 0)
    #: What the run's events say of it (._status, its one writer).
    view: RunView = field(default_factory=RunView)
    plan: Plan | None = None  # ._generations
    #: Where the ranks said training is (._steps, its one writer).
    step: int = 0
    highest_step: int = 0  # the highest step any report carried (._reports)
    epoch: int = 0  # ._progress_reports, ._end
    loss: float | str | None = None  # ._progress_reports, ._end
    finished_at: float | None = None  # ._end
    last_advance: float = 0.0  # when the step last moved on (._steps)
    errors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # ._end
    #: Ranks asked where they are, for a stall: the generation asked (._stall).
    asked: int | None = None
    members: Members = field(default_factory=Members)
    gens: Generations = field(default_factory=Generations)
    recovery: Recoveries = field(default_factory=Recoveries)
    progress: Progress = field(default_factory=Progress)
    noted: Notes = field(default_factory=Notes)

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

    @property
    def training(self) -> tuple[str, ...]:
        """The members of the current generation (none once the run stops)."""
        plan = self.plan
        return plan.members if plan is not None and not plan.stop else ()


def info(book: RunBook) -> dict[str, Any]:
    """The run as its events tell it (the fold the dashboards, the REST API and the
    panel read too), and what only the coordinator knows (members, history, errors,
    notes): what :meth:`~ft_notebook.train.Run.info` returns, plain JSON-able values."""
    plan, view = book.plan, book.view
    costs = sorted(book.noted.checkpoint_costs)
    return {
        "name": book.name,
        "incarnation": book.incarnation,
        "state": book.state.value,
        "health": book.health.value,
        "reason": book.reason,
        "step": view.step or 0,
        "total_steps": book.options.total_steps,
        "epoch": view.epoch or 0,
        "loss": view.loss,
        "world_size": view.world_size or 0,
        "members": list(plan.members) if plan is not None else [],
        "generation": plan.gen if plan is not None else 0,
        "history": [dict(p) for p in book.progress.history],
        "recoveries": [r.as_dict() for r in view.recoveries],
        "errors": {k: dict(v) for k, v in book.errors.items()},
        "notes": [dict(n) for n in book.noted.notes],
        "checkpoint": view.checkpoint_step,
        "resumed_from": book.members.resumed_from,
        "joins": [dict(j) for j in book.recovery.joins],
        "lagging": view.lagging,
        "nonfinite": book.noted.nonfinite,
        "started_at": book.started_at,
        "finished_at": book.finished_at,
        # what a save held training (median of the newest), and the auto plan
        "checkpoint_cost_s": costs[len(costs) // 2] if costs else None,
        "checkpoint_plan": (
            dict(book.noted.checkpoint_plan) if book.noted.checkpoint_plan is not None else None
        ),
        # a robust aggregator: steps each worker's gradient was suspect in
        "suspects": dict(view.suspects),
        "mean_steps": view.mean_steps,
        # members taken out for not meeting their peers, and why
        "evicted": dict(book.members.evicted),
        # whether a single loss now takes the fast path: every member of the generation
        # has built its groups without each other member (and trains)
        "fast_path_ready": plan is not None
        and not plan.stop
        and book.gens.can_survive(plan.gen, set(plan.members)),
    }
