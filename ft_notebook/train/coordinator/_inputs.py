"""What the coordinator's decisions take: one frozen class per kind of input.

Every input carries ``now``, the scheduler's clock when it arrived, so a decision
reads no clock of its own. The plugin (:mod:`._plugin`) makes them from what the
scheduler hands it (rank reports, the control plane's news, the kernels' calls,
its timers) and from the answers to the actions it carried out (:mod:`._actions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ft_notebook.train.protocol import Report


@dataclass(frozen=True)
class Launched:
    """The run may start: the cluster's rendezvous store, and its running workers
    (name, address) in name order."""

    now: float
    store: tuple[str, int]
    workers: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class LaunchFailed:
    """The run could not start (no rendezvous store, no worker list): why."""

    now: float
    error: str


@dataclass(frozen=True)
class ActorStarted:
    """A rank actor's start on worker ``name`` answered: ``error`` empty if it runs."""

    now: float
    name: str
    address: str
    error: str = ""


@dataclass(frozen=True)
class WarmupOver:
    """The run's warm-up time is up."""

    now: float


@dataclass(frozen=True)
class Reported:
    """A rank's report (read and checked: its kind's payload parses)."""

    now: float
    report: Report


@dataclass(frozen=True)
class WorkerNews:
    """The control plane's news of worker ``name``: ``lost``, ``hung`` or ``joined``."""

    now: float
    kind: str
    name: str
    address: str
    cause: str = ""


@dataclass(frozen=True)
class PlanAnswered:
    """The rank on ``address`` had no actor of the run when plan ``gen`` reached it."""

    now: float
    name: str
    address: str
    gen: int


@dataclass(frozen=True)
class ReformDue:
    """A collective failed at ``step`` of generation ``gen`` and the grace for the
    control plane's news of a loss is over."""

    now: float
    gen: int
    step: int
    error: str


@dataclass(frozen=True)
class Tick:
    """The watchdog's turn (twice a second): progress to publish, stalls to look for."""

    now: float


@dataclass(frozen=True)
class RankStates:
    """Where the members of generation ``gen`` said they are (those that answered):
    name -> the actor's state (``phase``, ``step``)."""

    now: float
    gen: int
    states: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class ProgressDue:
    """Progress may be published: the control plane's rows of the workers (name ->
    heartbeat age, memory, GPU health, restarts, state), and whether it must be."""

    now: float
    rows: Mapping[str, Mapping[str, Any]]
    force: bool = False


@dataclass(frozen=True)
class Cancelled:
    """A kernel cancelled the run."""

    now: float


@dataclass(frozen=True)
class ClusterClosing:
    """The scheduler closes: the run ends with its cluster."""

    now: float


Input = (
    Launched
    | LaunchFailed
    | ActorStarted
    | WarmupOver
    | Reported
    | WorkerNews
    | PlanAnswered
    | ReformDue
    | Tick
    | RankStates
    | ProgressDue
    | Cancelled
    | ClusterClosing
)
