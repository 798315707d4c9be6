"""What the coordinator's decisions do: one frozen class per kind of action.

A decision (:func:`~.decide.decide`) returns them in order; the plugin carries them
out (:mod:`._carry_out`) and turns what comes back into new inputs (:mod:`._inputs`).
:class:`Decision` gathers the actions of one call while it is made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ft_notebook.train.coordinator._inputs import Input
from ft_notebook.train.protocol import Plan


@dataclass(frozen=True)
class Publish:
    """Publish ``payload`` (an event payload) on the run's topic, at ``step``."""

    payload: Any
    step: int


@dataclass(frozen=True)
class Launch:
    """Find the cluster's rendezvous store and its workers (answered by ``Launched``)."""


@dataclass(frozen=True)
class StartActor:
    """Start a rank actor of the run on worker ``name`` (answered by ``ActorStarted``)."""

    name: str
    address: str
    first: bool


@dataclass(frozen=True)
class SendPlan:
    """Send ``plan`` to the rank on ``address`` (a ``PlanAnswered`` if it had no actor)."""

    name: str
    address: str
    plan: Plan


@dataclass(frozen=True)
class AskStates:
    """Ask the members of generation ``gen`` where they are (answered by ``RankStates``)."""

    gen: int
    addresses: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ForgetKeys:
    """Delete the rendezvous store's keys under ``prefix``: groups that never meet again."""

    prefix: str


@dataclass(frozen=True)
class Hold:
    """Keep the cluster up while the run lives (``release``: let it go)."""

    release: bool = False


@dataclass(frozen=True)
class EvictWorker:
    """Restart the worker at ``address`` (its rank is stuck computing)."""

    address: str


@dataclass(frozen=True)
class After:
    """Hand ``input`` back to the coordinator in ``delay_s`` seconds."""

    delay_s: float
    input: Input


@dataclass(frozen=True)
class PublishProgress:
    """Gather the workers' rows and decide on a ``ProgressDue`` now (``force``: publish
    even if it was published less than a second ago)."""

    force: bool = True


@dataclass(frozen=True)
class Log:
    """A line of the scheduler's log (``level``: a :mod:`logging` level name)."""

    level: str
    message: str


Action = (
    Publish
    | Launch
    | StartActor
    | SendPlan
    | AskStates
    | ForgetKeys
    | Hold
    | EvictWorker
    | After
    | PublishProgress
    | Log
)


@dataclass
class Decision:
    """The actions one call of :func:`~.decide.decide` takes, in order, and the time
    it was made at (its input's ``now``): built afresh by each call, returned as a
    tuple, never shared."""

    now: float
    actions: list[Action] = field(default_factory=list)

    def do(self, action: Action) -> None:
        self.actions.append(action)
