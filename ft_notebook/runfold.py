"""The one fold of a run's, or a service's, events into what is known of it.

A run is read in three places: the coordinator's record (what ``Run.info()``
returns), a notebook dashboard and the JupyterLab panel. They all take a recovery as
a :class:`Recovery`, and the dashboard and the panel take the run's state, health,
progress, checkpoint and recoveries from a :class:`RunView` folded here, so the
three cannot disagree on a fact. What only one of them shows (a dashboard's tiles,
loss series and markers; the coordinator's plans and history) stays with it.

A service is read in the same places: the coordinator's table (what ``svc.table()``
returns, the one source of its events), a service dashboard and the JupyterLab
panel. Both take its tier, reason, wanted count and replicas from a
:class:`ServiceView` folded here, the panel its traffic too (every caller's, by
:mod:`ft_notebook._traffic_series`); a caller's breakers stay with its router.

It lives below ``train``, ``widgets`` and ``server`` and imports only the events: the
server may not import training, and widgets sit below it (``pyproject.toml``'s contracts).

Guarantees:
- the fold is pure: :meth:`RunView.apply` returns a new view, changes nothing, reads
  no clock and does no I/O; the same events give equal views, live or replayed;
- an event is folded once: one whose topic has seen its sequence number already (a
  replay) gives back the very same view;
- an event of a kind the fold does not know, or whose payload this version cannot
  read (a journal is public, and other versions write it), moves only the view's
  bookkeeping (``seen``, ``updated``), never fails;
- a ``recovery-completed`` written before it carried every field of a recovery still
  folds: when and at which step from its envelope, how and verified as ``""``, ``False``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ft_notebook._recovery import Recovery
from ft_notebook._traffic_series import TrafficPoint, add_window
from ft_notebook.events import (
    CheckpointCommitted,
    CheckpointFailed,
    Event,
    Health,
    HealthChanged,
    RecoveryCompleted,
    ReplicaFailed,
    ReplicaLost,
    ReplicaReady,
    RolledBack,
    RunProgress,
    RunStarted,
    RunState,
    RunStateChanged,
    ServiceClosed,
    ServiceScaled,
    ServiceStarted,
    ServiceTraffic,
)

__all__ = [
    "MAX_POINTS",
    "RUN_KINDS",
    "SERVICE_KINDS",
    "Recovery",
    "ReplicaFact",
    "RunPoint",
    "RunView",
    "ServiceView",
]


class _Folded:
    """What every view knows of the events it folded (its ``seen`` field)."""

    seen: Mapping[str, int]

    def has_seen(self, event: Event) -> bool:
        return bool(event.seq) and event.seq <= self.seen.get(event.topic, 0)

    @property
    def last_seq(self) -> int:
        """The newest sequence number folded (0 for none)."""
        return max(self.seen.values(), default=0)


@dataclass(frozen=True)
class RunPoint:
    """One progress report of a run, kept for plots over time."""

    time: float
    step: int
    loss: float | None
    samples_per_s: float | None


#: Points a :class:`RunView` keeps. One more halves them (every other one kept, the
#: first and the newest always), so a history spans the whole run in bounded memory:
#: a run reporting once a second for a day keeps 121 to 240 points, not 86 400.
MAX_POINTS = 240


@dataclass(frozen=True)
class RunView(_Folded):
    """What a run's events say of it. Start from ``RunView()`` and ``apply`` each
    event; every field is None (or empty) until an event says otherwise. A
    ``run-started`` begins it afresh (PENDING, HEALTHY): a run resumed under a name
    used before is a new run, whatever the journal said of the old one."""

    #: From ``run-state-changed``, and from ``progress-reported`` (which repeats it).
    state: RunState | None = None
    health: Health | None = None
    #: Why the run is in its state; a change of health gives its own reason, except
    #: while the run is RECOVERING or STALLED, whose reason says why it does not train.
    reason: str = ""
    #: From the newest ``progress-reported``; a committed checkpoint moves it on to
    #: its step (the run got there), a roll-back back to where it went.
    step: int | None = None
    total_steps: int | None = None
    epoch: int | None = None
    world_size: int | None = None
    loss: float | None = None
    samples_per_s: float | None = None
    eta_s: float | None = None
    #: A robust aggregator's so far: worker -> steps its gradient was suspect in, and
    #: the steps trained with the mean because the rule's condition failed.
    suspects: Mapping[str, int] = field(default_factory=dict)
    mean_steps: int = 0
    #: The newest committed checkpoint: its step and the time of its event.
    checkpoint_step: int | None = None
    checkpoint_time: float | None = None
    #: A checkpoint failed and none was committed since, or rank 0 says saves lag.
    lagging: bool = False
    recoveries: tuple[Recovery, ...] = ()
    #: Its progress reports over time (step, loss, samples/s), at most MAX_POINTS.
    history: tuple[RunPoint, ...] = ()
    #: The step the run is known to have reached whatever a later progress event says
    #: (its newest checkpoint's, or where a roll-back took it): progress is published
    #: once a second, a checkpoint as it commits, and the two cross.
    floor: int = 0
    #: From ``run-started``: the registry name of its cluster and the scheduler's
    #: address (``""``: not a registered cluster, or a journal from before).
    cluster: str = ""
    scheduler: str = ""
    #: From ``run-started``: the scheduler's process (host, pid, start time; ``""``,
    #: 0 and 0.0 when not told).
    host: str = ""
    pid: int = 0
    pid_started: float = 0.0
    #: Topic -> the newest sequence number folded; never mutated (a new dict each time).
    seen: Mapping[str, int] = field(default_factory=dict)
    #: Time of the newest event folded.
    updated: float = 0.0

    def apply(self, event: Event) -> RunView:
        """This view with ``event`` folded in (this very view for a replayed event)."""
        view: RunView = _fold(self, event, _FOLDS)
        return view


def _fold(view: Any, event: Event, folds: Mapping[str, Callable[[Any, Any, Event], Any]]) -> Any:
    """``view`` (a RunView or a ServiceView) with ``event`` folded in by ``folds``."""
    if view.has_seen(event):
        return view
    seen = {**view.seen, event.topic: event.seq} if event.seq else view.seen
    view = replace(view, seen=seen, updated=event.time)
    fold = folds.get(event.kind)
    if fold is None:
        return view
    try:
        payload = event.payload()
    except (TypeError, ValueError):  # fields missing or values unknown: another version
        return view
    return fold(view, payload, event)


def _run_started(view: RunView, p: RunStarted, e: Event) -> RunView:
    return RunView(
        state=RunState.PENDING,
        health=Health.HEALTHY,
        total_steps=p.total_steps,
        cluster=p.cluster,
        scheduler=p.scheduler,
        host=p.host,
        pid=p.pid,
        pid_started=p.pid_started,
        seen=view.seen,
        updated=view.updated,
    )


def _state_changed(view: RunView, p: RunStateChanged, e: Event) -> RunView:
    return replace(view, state=p.state, reason=p.reason)


def _health_changed(view: RunView, p: HealthChanged, e: Event) -> RunView:
    waiting = view.state in (RunState.RECOVERING, RunState.STALLED)
    return replace(view, health=p.health, reason=view.reason if waiting else p.reason)


def _progressed(view: RunView, p: RunProgress, e: Event) -> RunView:
    step = max(p.step, view.floor)
    loss = p.loss if isinstance(p.loss, (int, float)) else None
    points = (*view.history, RunPoint(e.time, step, loss, p.samples_per_s))
    return replace(
        view,
        state=_known_state(p.state) or view.state,
        history=points[::2] if len(points) > MAX_POINTS else points,
        step=step,
        total_steps=p.total_steps,
        epoch=p.epoch,
        world_size=p.world_size,
        loss=loss,
        samples_per_s=p.samples_per_s,
        eta_s=p.eta_s,
        suspects=dict(p.suspects or {}),
        mean_steps=int(p.mean_steps or 0),
        lagging=view.lagging if p.lagging is None else p.lagging,
    )


def _checkpoint_committed(view: RunView, p: CheckpointCommitted, e: Event) -> RunView:
    # progress is published about once a second, a checkpoint as it commits: without
    # this a view said "step 59" beside "checkpoint of step 80"
    floor = max(view.floor, p.checkpoint_step)
    return replace(
        view,
        step=max(view.step or 0, floor),
        floor=floor,
        checkpoint_step=p.checkpoint_step,
        checkpoint_time=e.time,
        lagging=False,
    )


def _rolled_back(view: RunView, p: RolledBack, e: Event) -> RunView:
    return replace(view, step=p.to_step, floor=p.to_step)


def _checkpoint_failed(view: RunView, p: CheckpointFailed, e: Event) -> RunView:
    return replace(view, lagging=True)


def _recovered(view: RunView, p: RecoveryCompleted, e: Event) -> RunView:
    return replace(view, recoveries=(*view.recoveries, Recovery.from_event(p, e)))


def _known_state(value: str) -> RunState | None:
    """A progress event's state, if this version knows it ("" in older events)."""
    try:
        return RunState(value)
    except ValueError:
        return None


#: Event kind -> how it moves the view. Other kinds (worker events, skipped steps,
#: repairs, snapshots) say nothing the view keeps.
_FOLDS: dict[str, Callable[[RunView, Any, Event], RunView]] = {
    RunStarted.kind: _run_started,
    RunStateChanged.kind: _state_changed,
    HealthChanged.kind: _health_changed,
    RunProgress.kind: _progressed,
    CheckpointCommitted.kind: _checkpoint_committed,
    CheckpointFailed.kind: _checkpoint_failed,
    RolledBack.kind: _rolled_back,
    RecoveryCompleted.kind: _recovered,
}

#: The kinds that move a :class:`RunView`.
RUN_KINDS = frozenset(_FOLDS)


# ---- services


@dataclass(frozen=True)
class ReplicaFact:
    """One replica of a service as its events tell: where it is and how it is."""

    replica: str  # "service/index"
    worker: str = ""
    #: ``waiting`` (no event yet), ``ready``, ``lost`` or ``failed`` (its model did not
    #: build on ``worker``); the coordinator's table also has ``warming``, which is
    #: not an event.
    state: str = "waiting"
    #: Time of the event that put it in its state (0: none yet).
    since: float = 0.0
    #: Why it is lost or failed, in words (``ft_notebook._reasons.explain``, made where
    #: it was seen); ``detail``: the raw error behind them, for a tooltip.
    cause: str = ""
    warmup_s: float | None = None
    detail: str = ""

    @property
    def index(self) -> int:
        return int(self.replica.rsplit("/", 1)[1])


@dataclass(frozen=True)
class ServiceView(_Folded):
    """What a service's events say of it. Start from ``ServiceView(name)`` and
    ``apply`` each event of its topic. A ``service-started`` begins it afresh: a name
    closed and used again is a new service."""

    name: str = ""
    #: The coordinator's tier (ready replicas of wanted) and why; None until it says.
    health: Health | None = None
    reason: str = ""
    #: The raw error behind ``reason`` ("" when the words are all there is).
    detail: str = ""
    wanted: int = 0
    #: Replica key -> its fact, one per index below ``wanted``.
    replicas: Mapping[str, ReplicaFact] = field(default_factory=dict)
    #: Each change of tier: (time, tier, reason), the newest :data:`MAX_TRANSITIONS`.
    transitions: tuple[tuple[float, Health, str], ...] = ()
    #: Every caller's traffic by bucket of 2 s, the newest 240 (``service-traffic``).
    traffic: tuple[TrafficPoint, ...] = ()
    closed: bool = False
    seen: Mapping[str, int] = field(default_factory=dict)
    updated: float = 0.0

    def apply(self, event: Event) -> ServiceView:
        """This view with ``event`` folded in (this very view for a replayed event)."""
        view: ServiceView = _fold(self, event, _SERVICE_FOLDS)
        return view

    @property
    def ready(self) -> int:
        return sum(1 for r in self.replicas.values() if r.state == "ready")

    def replica_rows(self) -> list[ReplicaFact]:
        return sorted(self.replicas.values(), key=lambda r: r.index)


#: Tier changes a view keeps.
MAX_TRANSITIONS = 100


def _slots(view: ServiceView, wanted: int) -> dict[str, ReplicaFact]:
    """The view's replicas for ``wanted``: those below it kept, new ones waiting."""
    keys = [f"{view.name}/{i}" for i in range(wanted)]
    return {k: view.replicas.get(k) or ReplicaFact(k) for k in keys}


def _started(view: ServiceView, p: ServiceStarted, e: Event) -> ServiceView:
    fresh = ServiceView(view.name, seen=view.seen, updated=view.updated)
    return replace(fresh, wanted=p.wanted, replicas=_slots(fresh, p.wanted))


def _scaled(view: ServiceView, p: ServiceScaled, e: Event) -> ServiceView:
    return replace(view, wanted=p.wanted, replicas=_slots(view, p.wanted))


def _closed(view: ServiceView, p: ServiceClosed, e: Event) -> ServiceView:
    return replace(view, closed=True)


def _replica(view: ServiceView, key: str, **facts: Any) -> ServiceView:
    if view.wanted and key not in view.replicas:  # scaled away since
        return view
    fact = replace(view.replicas.get(key) or ReplicaFact(key), **facts)
    return replace(view, replicas={**view.replicas, key: fact})


def _replica_ready(view: ServiceView, p: ReplicaReady, e: Event) -> ServiceView:
    facts = dict(worker=p.worker, state="ready", since=e.time, cause="", detail="")
    return _replica(view, p.replica, warmup_s=p.warmup_s, **facts)


def _replica_out(state: str) -> Callable[[ServiceView, Any, Event], ServiceView]:
    """The fold of a replica-lost (``lost``) or replica-failed (``failed``) event."""

    def fold(view: ServiceView, p: ReplicaLost | ReplicaFailed, e: Event) -> ServiceView:
        facts = dict(worker=p.worker, state=state, since=e.time, cause=p.cause, detail=p.detail)
        return _replica(view, p.replica, **facts)

    return fold


def _service_health(view: ServiceView, p: HealthChanged, e: Event) -> ServiceView:
    changes = (*view.transitions, (e.time, p.health, p.reason))[-MAX_TRANSITIONS:]
    return replace(view, health=p.health, reason=p.reason, detail=p.detail, transitions=changes)


def _traffic(view: ServiceView, p: ServiceTraffic, e: Event) -> ServiceView:
    return replace(view, traffic=add_window(view.traffic, p))


_SERVICE_FOLDS: dict[str, Callable[[ServiceView, Any, Event], ServiceView]] = {
    ServiceStarted.kind: _started,
    ServiceScaled.kind: _scaled,
    ServiceClosed.kind: _closed,
    ReplicaReady.kind: _replica_ready,
    ReplicaLost.kind: _replica_out("lost"),
    ReplicaFailed.kind: _replica_out("failed"),
    HealthChanged.kind: _service_health,
    ServiceTraffic.kind: _traffic,
}

#: The kinds that move a :class:`ServiceView`.
SERVICE_KINDS = frozenset(_SERVICE_FOLDS)
