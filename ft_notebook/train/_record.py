"""A run's record in the coordinator: its options and everything known about it.

:meth:`Record.info` is what a :class:`~ft_notebook.train.Run` handle in any kernel
reads (plain, JSON-able values).

The coordinator's parts (:mod:`._coordinator`) share a run's record; each field has
one part that writes it: ``state``, ``reason`` and ``health`` :mod:`._status`;
``plan``, ``world``, ``parts``, ``synced``, ``verified``, ``prepared`` and opening
``pending`` :mod:`._generations`; ``actors``, ``ready``, ``seen``, ``arrivals``,
``admitting``, ``target_world`` and ``resumed_from`` :mod:`._membership`;
``recoveries``, ``joins``, ``regrouping`` and closing ``pending`` :mod:`._recoveries`;
``evicted`` and ``absent`` :mod:`._evictions`;
``history``, ``history_every``, ``steps_per_s`` and ``step_times`` :mod:`._history`;
``notes``, ``nonfinite``, ``checkpoint`` and ``lagging`` :mod:`._notes`;
``finished_at`` and ``errors`` :mod:`._end`; ``published`` :mod:`._progress_publisher`;
``highest_step`` :mod:`._reports`. ``step``, ``epoch``, ``loss`` and ``last_advance``
move on with the reports that carry them.
"""

from __future__ import annotations

import collections
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ft_notebook.config import train_setting
from ft_notebook.events import Health, RunState
from ft_notebook.exceptions import TrainingError
from ft_notebook.runfold import Recovery
from ft_notebook.train._protocol import Plan


@dataclass
class Options:
    """How the coordinator drives a run. Left out, a setting is read from
    ``ft-notebook.train`` when the options are built: by ``fit``, in the kernel."""

    min_workers: int = field(default_factory=train_setting("min_workers"))
    max_workers: int | None = None
    fast_recovery: bool = field(default_factory=train_setting("fast_recovery"))
    warmup_timeout_s: float = field(default_factory=train_setting("warmup_timeout_s"))
    #: A step that has not advanced for max(stall_min_s, stall_factor x the median
    #: step time) is a hang; the first steps get first_steps_floor_s.
    stall_factor: float = field(default_factory=train_setting("stall_factor"))
    stall_min_s: float = field(default_factory=train_setting("stall_min_s"))
    first_steps_floor_s: float = field(default_factory=train_setting("first_steps_floor_s"))
    total_steps: int = 0

    def validate(self) -> None:
        if type(self.min_workers) is not int or self.min_workers < 1:
            raise TrainingError(f"min_workers must be a positive int, got {self.min_workers!r}.")
        if type(self.fast_recovery) is not bool:
            raise TrainingError(f"fast_recovery must be True or False, got {self.fast_recovery!r}.")


@dataclass
class Record:
    name: str
    spec: bytes
    options: Options
    state: RunState = RunState.PENDING
    health: Health = Health.HEALTHY
    plan: Plan | None = None
    actors: dict[str, str] = field(default_factory=dict)  # worker name -> address
    #: Seconds each newest checkpoint held training (RunNotes, from rank 0's reports).
    checkpoint_costs: list[float] = field(default_factory=list)
    #: checkpoint_every="auto": the newest plan rank 0 made (RunNotes).
    checkpoint_plan: dict[str, Any] | None = None
    #: A robust aggregator: worker -> steps its gradient lay far from the aggregate, and
    #: steps aggregated with the mean for too few workers (the history, from progress).
    suspects: dict[str, int] = field(default_factory=dict)
    mean_steps: int = 0
    ready: dict[str, float] = field(default_factory=dict)  # worker -> when its rank was ready
    synced: dict[int, set[str]] = field(default_factory=dict)
    #: Generations whose members checked that they hold one vouched-for state.
    verified: set[int] = field(default_factory=set)
    prepared: dict[int, set[str]] = field(default_factory=dict)
    step: int = 0
    highest_step: int = 0
    epoch: int = 0
    loss: float | str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    history_every: int = 1
    recoveries: list[Recovery] = field(default_factory=list)
    pending: dict[str, Any] | None = None
    errors: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: list[dict[str, Any]] = field(default_factory=list)  # nonfinite, rollback, checkpoints
    checkpoint: int | None = None
    lagging: bool = False
    nonfinite: int = 0
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    last_advance: float = field(default_factory=time.time)
    step_times: list[float] = field(default_factory=list)
    target_world: int = 0
    world: int = 0  # the world size of the newest generation that trained
    parts: int = 0  # the largest world size so far: each step's batch is cut into as many
    reason: str = ""
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    resumed_from: int | None = None  # the checkpoint step a resume=True run began at
    arrivals: dict[str, float] = field(default_factory=dict)  # joiners: when they came
    admitting: dict[str, dict[str, Any]] = field(default_factory=dict)
    joins: list[dict[str, Any]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # every worker that had a rank of the run
    steps_per_s: float = 0.0
    #: Re-forms of the same members after collectives failed at one step with no
    #: loss: {"step", "since" (the first), "count"}.
    regrouping: dict[str, Any] | None = None
    #: Members taken out of the run for not meeting their peers: name -> why.
    evicted: dict[str, str] = field(default_factory=dict)
    #: Generation -> how often each member was reported absent from its rendezvous.
    absent: dict[int, collections.Counter[str]] = field(default_factory=dict)
    published: tuple[float, Any] = (0.0, None)  # when, and what, progress was last published

    @property
    def finished(self) -> bool:
        return self.state.finished

    def info(self) -> dict[str, Any]:
        plan = self.plan
        costs = sorted(self.checkpoint_costs)
        return {
            "name": self.name,
            "state": self.state.value,
            "health": self.health.value,
            "reason": self.reason,
            "step": self.step,
            "total_steps": self.options.total_steps,
            "epoch": self.epoch,
            "loss": self.loss,
            "world_size": self.world,
            "members": list(plan.members) if plan is not None else [],
            "generation": plan.gen if plan is not None else 0,
            "history": list(self.history),
            "recoveries": [r.as_dict() for r in self.recoveries],
            "errors": dict(self.errors),
            "notes": list(self.notes[-200:]),
            "checkpoint": self.checkpoint,
            "resumed_from": self.resumed_from,
            "joins": list(self.joins),
            "lagging": self.lagging,
            "nonfinite": self.nonfinite,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            # what a save held training (median of the newest), and the auto plan
            "checkpoint_cost_s": costs[len(costs) // 2] if costs else None,
            "checkpoint_plan": self.checkpoint_plan,
            # a robust aggregator: steps each worker's gradient was suspect in
            "suspects": dict(self.suspects),
            "mean_steps": self.mean_steps,
            # members taken out for not meeting their peers, and why
            "evicted": dict(self.evicted),
        }
