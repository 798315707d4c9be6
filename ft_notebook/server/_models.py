"""What the REST API returns: frozen dataclasses with a ``to_json``.

These are the models the labextension's TypeScript types are meant to be generated
from, so every field is a JSON value (numbers, strings, lists, objects, null) and a
change here is a change of the API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ft_notebook.events import Health, RunState
from ft_notebook.runfold import Recovery


@dataclass(frozen=True)
class ClusterModel:
    """A running cluster of the user's registry."""

    name: str
    address: str
    pid: int
    #: Wall-clock time the cluster became ready (seconds since the epoch).
    started: float
    gpus: tuple[str, ...] = ()
    #: Stable worker name -> pid of its worker process, as last registered.
    workers: Mapping[str, int] = field(default_factory=dict)
    dashboard: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["gpus"] = list(self.gpus)
        out["workers"] = dict(self.workers)
        return out


@dataclass(frozen=True)
class RecoveryModel:
    """One recovery of a run from a lost or hung worker."""

    #: Wall-clock time the survivors trained again (seconds since the epoch).
    time: float
    cause: str
    #: Seconds from the loss being detected to the first step trained after it.
    rto_s: float
    steps_lost: int
    workers_before: int
    workers_after: int
    #: Wall-clock time the loss was detected.
    detected_at: float = 0.0
    #: survive (the survivors' ready groups) | form (a rendezvous); "" if not recorded.
    how: str = ""
    #: The generation that trained again (0: not recorded) and its first step.
    generation: int = 0
    step: int = 0
    #: The members checked that they went on from one state a member vouched for.
    verified: bool = False

    @classmethod
    def of(cls, recovery: Recovery) -> RecoveryModel:
        r = recovery
        return cls(
            time=r.resumed_at,
            cause=r.cause,
            rto_s=r.rto_s,
            steps_lost=r.steps_lost,
            workers_before=r.workers_before,
            workers_after=r.workers_after,
            detected_at=r.detected_at,
            how=r.how,
            generation=r.generation,
            step=r.step,
            verified=r.verified,
        )


@dataclass(frozen=True)
class RunModel:
    """A training run seen in the journals: its newest state, health and progress."""

    name: str
    topic: str
    #: The newest ``run-state-changed`` state; None if the run published none yet.
    state: RunState | None
    #: The newest ``health-changed`` health (DEGRADED: fewer workers than it had).
    health: Health | None
    #: Sequence number and time of the run's newest event (0 and 0.0 for none).
    last_seq: int
    updated: float
    #: From the newest ``progress-reported`` event; None before the first.
    step: int | None = None
    total_steps: int | None = None
    world_size: int | None = None
    loss: float | None = None
    #: The newest committed checkpoint: its step and wall-clock time.
    checkpoint_step: int | None = None
    checkpoint_time: float | None = None
    #: The newest recoveries, oldest first (at most :data:`MAX_RECOVERIES`).
    recoveries: tuple[RecoveryModel, ...] = ()
    #: The registered cluster it runs on ("" when not one of the user's registry).
    cluster: str = ""
    #: The run never said it ended, and its cluster is no longer running: its state
    #: is the last it told, not what it is now (nothing trains, nothing checkpoints).
    cluster_gone: bool = False

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["recoveries"] = [asdict(r) for r in self.recoveries]
        return out


#: Recoveries a :class:`RunModel` lists; older ones stay in the run's journal.
MAX_RECOVERIES = 20


@dataclass(frozen=True)
class SnapshotModel:
    """One notebook snapshot, described by its manifest (its data is not read)."""

    name: str
    step: int
    time: float
    cell: int
    #: Bytes of the captured values.
    size: int
    variables: tuple[str, ...]
    pinned: bool
    #: The notebook's key before it was renamed, when the snapshot was taken under
    #: that name (a kernel started under the new one restores it); empty otherwise.
    renamed_from: str = ""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["variables"] = list(self.variables)
        return out


@dataclass(frozen=True)
class ReplicaModel:
    """One replica of a service, as its coordinator keeps it."""

    replica: str
    worker: str
    #: waiting | warming | ready | failed | lost
    state: str
    #: Wall-clock time it entered that state.
    since: float
    cause: str = ""


@dataclass(frozen=True)
class ServiceModel:
    """A service running on one of the user's clusters."""

    name: str
    cluster: str
    #: HEALTHY (every replica ready), DEGRADED (some), FALLBACK (none).
    health: Health
    reason: str
    wanted: int
    ready: int
    replicas: tuple[ReplicaModel, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["replicas"] = [asdict(r) for r in self.replicas]
        return out


@dataclass(frozen=True)
class RunPointModel:
    """One progress report of a run: when, at which step, its loss and throughput."""

    time: float
    step: int
    #: Null when not told, or not finite (JSON has no NaN).
    loss: float | None
    samples_per_s: float | None


@dataclass(frozen=True)
class RunHistoryModel:
    """A run as the panel shows it, why it is in its state, and its progress over time."""

    run: RunModel
    #: Why the run is in its state (or its health), as its events said; "" if not told.
    reason: str
    #: Oldest first; the whole run at most :data:`ft_notebook.runfold.MAX_POINTS`
    #: points (older ones thinned), so a plot spans it from its first step.
    points: tuple[RunPointModel, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run.to_json(),
            "reason": self.reason,
            "points": [asdict(p) for p in self.points],
        }


@dataclass(frozen=True)
class TierChangeModel:
    """A change of a service's tier: when, to which, and why."""

    time: float
    tier: Health
    reason: str


@dataclass(frozen=True)
class TrafficPointModel:
    """Every caller's requests/s to a service in a 2 s bucket, and their largest p99."""

    time: float
    requests_per_s: float
    #: Null before any request was answered.
    p99_ms: float | None


@dataclass(frozen=True)
class ServiceHistoryModel:
    """A service as the panel shows it, with its tier and its traffic over time."""

    service: ServiceModel
    #: Its changes of tier, oldest first (the newest 100, from its events).
    tiers: tuple[TierChangeModel, ...] = ()
    #: Every caller's traffic (notebooks' and this server's HTTP route), from the
    #: ``service-traffic`` events its routers publish; the newest 240 buckets.
    traffic: tuple[TrafficPointModel, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "service": self.service.to_json(),
            "tiers": [asdict(t) for t in self.tiers],
            "traffic": [asdict(t) for t in self.traffic],
        }


@dataclass(frozen=True)
class PredictionModel:
    """A service's answer over HTTP, and where it came from."""

    #: The model's output as JSON (a tensor or array as nested lists).
    outputs: Any
    #: "SERVICE/INDEX"; null when the fallback answered.
    replica: str | None
    tier: Health
    retries: int
    hedged: bool
    latency_s: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ChaosResultModel:
    """What a chaos action did: the signal, to which worker, to which process."""

    cluster: str
    action: str
    signal: str
    worker: str
    address: str
    pid: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ClusterStoppedModel:
    """What a stop from the panel did: the cluster and its processes are gone."""

    name: str
    #: The pids of the cluster's process and its workers, as registered before it
    #: stopped (every one has exited when this answer is sent).
    pids: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "pids": list(self.pids)}


@dataclass(frozen=True)
class KernelUsageModel:
    """The memory of one of this server's kernels, read from its process."""

    kernel_id: str
    pid: int
    #: Resident set size of the kernel's process, in bytes.
    rss: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ErrorModel:
    """The body of every error response (400, 403, 404, 409, 429, 500, 503, 504)."""

    message: str
    #: The error's class: BadRequest, Refused, NotFound, Unavailable, ...
    reason: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
