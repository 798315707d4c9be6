"""What the run coordinator and the rank actors say to each other.

The three processes of a run meet here and in :mod:`.spec`, and nowhere else: the
kernel (``kernel/``), the coordinator in the scheduler (``coordinator/``) and the rank
actors in the workers (``rank/``) never import each other. They call each other as
Dask's own extensions do (``distributed.shuffle``), by named handlers that their
plugins register:

- kernel -> coordinator: the scheduler handler :data:`SCHEDULER_HANDLER` with a
  :class:`RunAction` (``client.scheduler.ft_train(action="info", name=...)``);
- coordinator -> rank, kernel -> ranks: the worker handlers of :class:`RankOp`
  (``scheduler.rpc(address).ft_train_deliver(run=..., plan=...)``);
- rank -> coordinator: :class:`Report` s through the scheduler's event log under
  :data:`REPORT_TOPIC`, which the coordinator reads in its ``log_event`` hook;
- coordinator -> everyone else: the run's events (:mod:`ft_notebook.events`).

Plans and reports travel as plain JSON-able dicts (msgpack on the wire): nothing here
is ever unpickled, so a message cannot run code.

A *generation* is one fixed set of ranks with its own process group. Its plan says
how the group is made: ``form`` (a rendezvous in the cluster's store under a fresh
prefix) or ``survive`` (switch to the group that generation ``base`` prepared
without the one lost rank: no rendezvous).
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

#: Scheduler event-log topic of rank reports (internal; not a journal topic).
REPORT_TOPIC = "ft-notebook-train-reports"


#: The scheduler handler the coordinator registers; it takes a :class:`RunAction`.
SCHEDULER_HANDLER = "ft_train"


class RunAction(str, enum.Enum):
    """What a kernel asks of the coordinator (the ``action`` of :data:`SCHEDULER_HANDLER`)."""

    SUBMIT = "submit"  # name, spec (pickled FitSpec), options (RunOptions as a dict)
    INFO = "info"  # name -> the run's record
    STATE = "state"  # name -> its RunState alone, a few bytes
    CANCEL = "cancel"  # name -> the run's record
    NAMES = "names"  # -> the runs' names, oldest first


class RankOp(str, enum.Enum):
    """The worker handlers of the rank side (each takes ``run``)."""

    START = "ft_train_start"  # spec, name, first, incarnation -> started | running
    DELIVER = "ft_train_deliver"  # plan (Plan.to_wire) -> delivered | no-actor
    STATE = "ft_train_state"  # -> the actor's phase, as JSON
    LOGS = "ft_train_logs"  # -> the actor's log lines
    FINAL_STATE = "ft_train_final_state"  # -> rank 0's final state (torch.save) or None


class How(str, enum.Enum):
    """How a generation's process group is made."""

    FORM = "form"  # a rendezvous in the cluster's store under a fresh prefix
    SURVIVE = "survive"  # the group generation ``base`` prepared without the lost rank


class ReportKind(str, enum.Enum):
    """What a rank reports (see :class:`Report`)."""

    READY = "ready"  # warmed up: model, optimizer and data built
    SYNCED = "synced"  # generation ``gen`` trains from ``step``, its state verified
    PREPARED = "prepared"  # its survivor groups exist
    RESUMED = "resumed"  # rank 0: the first step of a generation committed
    PROGRESS = "progress"  # rank 0, throttled
    EVAL = "eval"  # rank 0, when a background evaluation ends
    CHECKPOINT = "checkpoint"  # a durable checkpoint committed
    CHECKPOINT_FAILED = "checkpoint-failed"
    NONFINITE = "nonfinite"  # a step skipped for a NaN or Inf
    ROLLBACK = "rollback"  # too many non-finite steps: back to a checkpoint
    STATE_REPAIRED = "state-repaired"  # members took a vouched-for state
    PEER_FAILED = "peer-failed"  # a collective failed
    DONE = "done"
    ERROR = "error"


class Phase(str, enum.Enum):
    """Where a rank actor is (``rank_state``; the coordinator's stall watch reads it)."""

    WARMING = "warming"
    READY = "ready"
    PARKED = "parked"  # not a member of the newest generation
    RENDEZVOUS = "rendezvous"
    SYNC = "sync"
    VERIFY = "verify"
    COMPUTE = "compute"
    REDUCE = "reduce"
    PEER_FAILED = "peer-failed"
    DONE = "done"
    FAILED = "failed"


class UnknownMessage(ValueError):
    """A message of a kind this version does not know: refused, never guessed at."""


@dataclass(frozen=True)
class Plan:
    run: str
    gen: int
    #: Worker names in rank order. Empty: nobody trains (the run is stalled).
    members: tuple[str, ...]
    store: tuple[str, int]
    how: How = How.FORM
    base: int | None = None  # the generation whose survivor group "survive" uses
    lost: str | None = None
    prepare: bool = True  # build leave-one-out groups for the next single loss
    stop: str = ""  # non-empty: stop the rank actor ("cancelled", "failed", ...)
    #: The newest step the coordinator knows committed: when no member holds a state
    #: (every holder was lost), the ranks read the newest durable checkpoint instead.
    committed: int = 0
    #: Unique per submission of the run: a name used again on the same cluster must
    #: not meet the old run's keys in the rendezvous store.
    incarnation: str = ""
    #: How many parts each step's batch is cut into: the run's largest world size so
    #: far, so that losing ranks does not change the arithmetic (0: the world size).
    parts: int = 0
    #: A plan that only admits joiners: the members training finish their steps
    #: before this one first (0: at once, whatever they are doing).
    switch_at: int = 0

    @property
    def prefix(self) -> str:
        """The rendezvous store prefix of this generation's groups."""
        return generation_prefix(self.run, self.incarnation, self.gen)

    def __post_init__(self) -> None:
        object.__setattr__(self, "how", _member(How, self.how))

    def to_wire(self) -> dict[str, Any]:
        return {**asdict(self), "how": self.how.value}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Plan:
        data = dict(data)
        data["members"] = tuple(data["members"])
        data["store"] = (str(data["store"][0]), int(data["store"][1]))
        return cls(**data)

    def rank_of(self, name: str) -> int | None:
        return self.members.index(name) if name in self.members else None


@dataclass(frozen=True)
class Report:
    """One message of a rank: ``kind`` says what happened, ``data`` the details.

    ``kind`` is a :class:`ReportKind`; one this version does not know is refused
    (:class:`UnknownMessage`). ``data`` stays a plain dict, as it travels; its kind's
    class in :mod:`.report_kinds` builds it at the rank and reads it at the coordinator.
    """

    run: str
    name: str
    kind: ReportKind
    gen: int = 0
    step: int = 0
    time: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)
    #: The run's submission the rank was started for: a late report of an earlier run
    #: of the same name is ignored (empty: not told).
    incarnation: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", _member(ReportKind, self.kind))

    def to_wire(self) -> dict[str, Any]:
        # plain values only: the scheduler's event log refuses a str subclass (an
        # enum member such as How.SURVIVE), and a report refused is a report lost
        data = {k: v.value if isinstance(v, enum.Enum) else v for k, v in self.data.items()}
        return {**asdict(self), "kind": self.kind.value, "data": data}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Report:
        try:
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except TypeError as e:  # a field every report has is missing
            raise UnknownMessage(f"a report without its envelope ({e}): {sorted(data)}") from e


def _member(kind: type[enum.Enum], value: Any) -> Any:
    """``value`` as a member of ``kind``, or :class:`UnknownMessage` naming both."""
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(str(m.value) for m in kind)
        raise UnknownMessage(f"unknown {kind.__name__} {value!r} (known: {known})") from None


def generation_prefix(run: str, incarnation: str, gen: int | None = None) -> str:
    """Where generation ``gen`` of a run meets in the rendezvous store (its survivor
    groups meet under it too); without ``gen``: every generation of the run."""
    base = f"ft/{run}/{incarnation}/"
    return base if gen is None else f"{base}g{gen}/"


def plain(x: Any) -> Any:
    """A float for a report (JSON): NaN and infinity as strings."""
    x = float(x)
    return x if x == x and abs(x) != float("inf") else str(x)
