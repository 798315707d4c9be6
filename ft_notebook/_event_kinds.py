"""What events say: one frozen payload class per kind, and the states they carry.

Every kind of event (``worker-lost``, ``run-state-changed``, ...) has its payload class
here, registered under its past-tense kind by :func:`event_kind`.
:mod:`ft_notebook.events` puts a payload in its envelope and carries it; it re-exports
the payloads, the states and :func:`event_kind`: import them from there. The
vocabulary is kept apart from the channel so that it reads, and grows, in one place.

Guarantees:
- a kind names one payload class: registering a kind twice fails at import;
- a payload written as plain data (:func:`data_of`) and read back (:func:`payload_of`)
  is equal to itself: enums and tuples come back typed;
- data from a newer version reads: a field this version does not know is left out of
  the payload, and a kind it does not know has no payload (None), not an error.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, Union, get_args, get_origin, get_type_hints


class RunState(str, enum.Enum):
    """State of a training run::

    PENDING ─► RUNNING ⇄ RECOVERING
                  ⇅          ⇅
               STALLED (below min_workers)
    any of them ─► COMPLETED | FAILED | CANCELLED
    """

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    STALLED = "STALLED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def finished(self) -> bool:
        return self in (RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED)


class Health(str, enum.Enum):
    """Health of a run, a service or one replica::

    HEALTHY (all replicas) ─► DEGRADED (fewer, still working)
        ─► FALLBACK (a service answered by its fallback)
    a replica is LOST while it is gone
    """

    HEALTHY = "HEALTHY"
    DEGRADED = "DEGRADED"
    FALLBACK = "FALLBACK"
    LOST = "LOST"


class EventPayload:
    """Base of typed payloads. Subclasses are frozen dataclasses with a ``kind``."""

    kind: ClassVar[str]


_PAYLOADS: dict[str, type[EventPayload]] = {}
P = TypeVar("P", bound=type[EventPayload])


def event_kind(kind: str) -> Callable[[P], P]:
    """Register a payload class under its past-tense kind, e.g. ``worker-lost``."""

    def register(cls: P) -> P:
        if kind in _PAYLOADS:
            raise ValueError(f"event kind {kind!r} is registered twice")
        cls.kind = kind
        _PAYLOADS[kind] = cls
        return cls

    return register


@event_kind("worker-joined")
@dataclass(frozen=True)
class WorkerJoined(EventPayload):
    name: str
    address: str
    pid: int | None = None
    gpu: str | None = None


@event_kind("worker-lost")
@dataclass(frozen=True)
class WorkerLost(EventPayload):
    name: str
    address: str
    cause: str = ""


@event_kind("worker-hung")
@dataclass(frozen=True)
class WorkerHung(EventPayload):
    name: str
    address: str
    heartbeat_age_s: float


@event_kind("run-started")
@dataclass(frozen=True)
class RunStarted(EventPayload):
    """A run (or a run resumed under the same name) began: what was known of an
    earlier run of that name is no longer this run's. It starts PENDING and HEALTHY.
    """

    total_steps: int
    #: The registry name of the ft_notebook cluster it runs on and its scheduler's
    #: address, so a view can tell when that cluster is gone; ``""`` on a cluster that
    #: is not in the user's registry (``cluster="local"``, a Dask cluster given by
    #: address), whose end no view can see.
    cluster: str = ""
    scheduler: str = ""
    #: The scheduler's process: its host, pid and start time (``psutil``'s
    #: ``create_time``), so a view on that host can tell the process is gone even when
    #: the cluster is in no registry (``cluster="local"`` dies with its kernel).
    host: str = ""
    pid: int = 0
    pid_started: float = 0.0
    #: Which run of that name this is (``run.info()["incarnation"]``): a kernel that
    #: follows it reads nothing of an earlier run of the name.
    incarnation: str = ""


@event_kind("run-state-changed")
@dataclass(frozen=True)
class RunStateChanged(EventPayload):
    state: RunState
    previous: RunState | None = None
    reason: str = ""


@event_kind("health-changed")
@dataclass(frozen=True)
class HealthChanged(EventPayload):
    health: Health
    previous: Health | None = None
    #: Why, in words (``ft_notebook._reasons.explain``); ``detail``: the raw error.
    reason: str = ""
    detail: str = ""


@event_kind("recovery-completed")
@dataclass(frozen=True)
class RecoveryCompleted(EventPayload):
    """A run trained again after losing workers: every field of a
    :class:`ft_notebook.runfold.Recovery`, which folds it."""

    cause: str
    rto_s: float
    steps_lost: int
    workers_before: int
    workers_after: int
    # Journals written before these were carried lack them; the fold takes the
    # envelope's time and step instead, and reads the rest as unknown.
    detected_at: float | None = None
    resumed_at: float | None = None
    how: str = ""
    generation: int | None = None
    step: int | None = None
    verified: bool = False


@event_kind("checkpoint-committed")
@dataclass(frozen=True)
class CheckpointCommitted(EventPayload):
    checkpoint_step: int
    nbytes: int
    location: str = ""


@event_kind("checkpoint-skipped")
@dataclass(frozen=True)
class CheckpointSkipped(EventPayload):
    """A checkpoint failed verification on load; an older one was used instead."""

    checkpoint_step: int
    reason: str
    used_step: int | None = None
    location: str = ""


@event_kind("progress-reported")
@dataclass(frozen=True)
class RunProgress(EventPayload):
    """A run's progress and its workers, about once a second while it trains."""

    step: int
    total_steps: int
    epoch: int
    world_size: int
    loss: float | None = None
    samples_per_s: float | None = None
    eta_s: float | None = None
    state: str = ""
    #: One dict per worker of the run: name, state ("training", "waiting", "lost",
    #: "hung"), heartbeat_age_s, rss, gpu (NVML memory and utilisation, if any).
    workers: tuple[dict[str, Any], ...] = ()
    #: A robust aggregator's, so far: worker -> the steps its gradient was suspect in
    #: (against the step taken, non-finite, or an order of magnitude too long).
    suspects: dict[str, int] = field(default_factory=dict)
    #: Steps trained with the mean because the rule's condition failed
    #: (``on_violation="mean"``), so far.
    mean_steps: int = 0
    #: Checkpoints lag: saves fail, or queue behind a slow one (None: not told).
    lagging: bool | None = None


@event_kind("step-skipped")
@dataclass(frozen=True)
class StepSkipped(EventPayload):
    """A training step had a NaN or Inf loss or gradient on some rank: not applied."""

    skipped_step: int
    streak: int
    reason: str = "non-finite loss or gradient"


@event_kind("checkpoint-failed")
@dataclass(frozen=True)
class CheckpointFailed(EventPayload):
    """A durable checkpoint could not be written; training goes on, the next try is later."""

    checkpoint_step: int
    error: str
    retry_at_step: int


@event_kind("rolled-back")
@dataclass(frozen=True)
class RolledBack(EventPayload):
    """Too many skipped steps in a row: the run went back to its last good state."""

    from_step: int
    to_step: int
    skipped_steps: tuple[int, ...] = ()


@event_kind("state-repaired")
@dataclass(frozen=True)
class StateRepaired(EventPayload):
    """After a change of group some members held another training state than the one
    a member had committed; they took that one (the run's self-check)."""

    at_step: int
    workers: tuple[str, ...]
    source: str
    when: str = ""


@event_kind("snapshot-committed")
@dataclass(frozen=True)
class SnapshotCommitted(EventPayload):
    name: str
    nbytes: int
    variables: int
    lost: tuple[str, ...] = ()
    #: The key of the notebook it is a snapshot of (``NotebookSession.notebook``): the
    #: session topic is every notebook's, and a view shows only its own notebook's.
    #: ``""`` in journals written before the field existed.
    notebook: str = ""


@event_kind("replica-ready")
@dataclass(frozen=True)
class ReplicaReady(EventPayload):
    """A replica built its model, passed its health check and takes requests."""

    replica: str
    worker: str
    address: str
    warmup_s: float = 0.0


@event_kind("replica-lost")
@dataclass(frozen=True)
class ReplicaLost(EventPayload):
    """A replica stopped taking requests: its worker left, or it failed to start."""

    replica: str
    worker: str
    address: str
    #: Why, in words (``ft_notebook._reasons.explain``); ``detail``: the raw error.
    cause: str = ""
    detail: str = ""


@event_kind("replica-failed")
@dataclass(frozen=True)
class ReplicaFailed(EventPayload):
    """A replica's model could not be built on a worker (its factory raised, or it did
    not build within the warm-up timeout); the service tries another worker."""

    replica: str
    worker: str
    cause: str = ""
    detail: str = ""


@event_kind("service-started")
@dataclass(frozen=True)
class ServiceStarted(EventPayload):
    """A service was created with ``wanted`` replicas (a name used before starts over)."""

    wanted: int


@event_kind("service-scaled")
@dataclass(frozen=True)
class ServiceScaled(EventPayload):
    """A service was scaled from ``previous`` to ``wanted`` replicas."""

    wanted: int
    previous: int


@event_kind("service-closed")
@dataclass(frozen=True)
class ServiceClosed(EventPayload):
    """A service was closed: its replicas stopped."""


@event_kind("service-traffic")
@dataclass(frozen=True)
class ServiceTraffic(EventPayload):
    """What one caller's router (``caller``: host:pid:router) did in a window of wall
    times ``start`` to ``end``, published about every 2 s while it has traffic: requests
    admitted; answered by each replica (key -> count) and by the fallback; failed
    (refused, shed or unanswered); p50 and p99 of the replicas' answers (None: none)."""

    caller: str
    start: float
    end: float
    requests: int
    by_replica: dict[str, int] = field(default_factory=dict)
    fallback: int = 0
    failed: int = 0
    p50_s: float | None = None
    p99_s: float | None = None


def payload_of(kind: str, data: Mapping[str, Any]) -> EventPayload | None:
    """The payload of kind ``kind`` with the fields of ``data`` (plain JSON values),
    or None for a kind this version does not know."""
    cls = _PAYLOADS.get(kind)
    if cls is None:
        return None
    hints = _field_hints(kind)
    return cls(**{k: _coerce(hints[k], v) for k, v in data.items() if k in hints})


def data_of(payload: EventPayload) -> dict[str, Any]:
    """The fields of ``payload`` as plain JSON values (enums as their values, tuples
    as lists)."""
    fields = dataclasses.fields(payload)  # type: ignore[arg-type]
    return {f.name: _plain(getattr(payload, f.name)) for f in fields}


@functools.cache
def _field_hints(name: str) -> dict[str, Any]:
    """The type hint of each field of payload kind ``name`` (resolving is slow: once)."""
    kind = _PAYLOADS[name]
    hints = get_type_hints(kind)
    return {f.name: hints[f.name] for f in dataclasses.fields(kind)}  # type: ignore[arg-type]


def _coerce(hint: Any, value: Any) -> Any:
    """Turn a JSON value back into the payload field's type (enums, tuples)."""
    if value is None:
        return None
    if get_origin(hint) in (Union, types.UnionType):
        hint = next(a for a in get_args(hint) if a is not type(None))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if get_origin(hint) is tuple and isinstance(value, list):
        return tuple(value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value
