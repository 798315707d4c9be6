"""The one channel every component publishes to, and what travels on it.

An :class:`Event` is an envelope ``{seq, topic, kind, time, run?, worker?,
generation?, step?, data}``; its ``data`` has the fields of a typed payload
(:class:`WorkerLost`, :class:`RunStateChanged`, ...). The payloads and the states
they carry (:class:`RunState`, :class:`Health`) are defined in :mod:`._event_kinds`
and imported from here, with the envelope and the channel. :func:`publish` appends the
event to the topic's durable journal, which gives it its sequence number, then sends
it live: through the Dask scheduler's event log when this process belongs to a
cluster, and always through the in-process bus. :func:`subscribe` replays the
journal and then follows the live tail, so a consumer sees every event exactly once
and in order, however late it subscribes; :func:`history` reads the journal alone.

Guarantees:
- sequence numbers of a topic increase by one, across processes of one machine;
- a journal survives the processes that wrote it (the kernel, the scheduler);
- an event from a newer version round-trips: unknown fields are kept, not fatal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ft_notebook._event_kinds import (
    CheckpointCommitted,
    CheckpointFailed,
    CheckpointSkipped,
    EventPayload,
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
    SnapshotCommitted,
    StateRepaired,
    StepSkipped,
    WorkerHung,
    WorkerJoined,
    WorkerLost,
    data_of,
    event_kind,
    payload_of,
)
from ft_notebook._paths import checked_name
from ft_notebook.exceptions import EventError

if TYPE_CHECKING:
    from ft_notebook._delivery import Subscription

__all__ = [
    "CheckpointCommitted",
    "CheckpointFailed",
    "CheckpointSkipped",
    "Event",
    "EventPayload",
    "Health",
    "HealthChanged",
    "RecoveryCompleted",
    "ReplicaFailed",
    "ReplicaLost",
    "ReplicaReady",
    "RolledBack",
    "RunProgress",
    "RunStarted",
    "RunState",
    "RunStateChanged",
    "ServiceClosed",
    "ServiceScaled",
    "ServiceStarted",
    "ServiceTraffic",
    "SnapshotCommitted",
    "StateRepaired",
    "StepSkipped",
    "WorkerHung",
    "WorkerJoined",
    "WorkerLost",
    "cluster_topic",
    "event_kind",
    "event_of",
    "history",
    "publish",
    "run_topic",
    "service_topic",
    "session_topic",
    "subscribe",
]


TOPIC_PREFIX = "ft-notebook"


def cluster_topic() -> str:
    """Membership and health of the cluster's workers."""
    return f"{TOPIC_PREFIX}.cluster"


def session_topic() -> str:
    """Notebook snapshots."""
    return f"{TOPIC_PREFIX}.session"


def run_topic(run: str) -> str:
    """Everything that happens to one training run."""
    return f"{TOPIC_PREFIX}.run.{checked_name(run, 'run name')}"


def service_topic(service: str) -> str:
    """Everything that happens to one service and its replicas."""
    return f"{TOPIC_PREFIX}.service.{checked_name(service, 'service name')}"


@dataclass(frozen=True)
class Event:
    """The envelope every event travels in; ``data`` holds the payload's fields."""

    topic: str
    kind: str
    seq: int = 0
    time: float = 0.0
    run: str | None = None
    worker: str | None = None
    generation: int | None = None
    step: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    #: Top-level fields written by a newer version; kept so they round-trip.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        for f in _ENVELOPE_FIELDS:
            value = getattr(self, f)
            if value is not None or f in _REQUIRED:
                out[f] = dict(value) if f == "data" else value
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Event:
        missing = [f for f in _REQUIRED if f not in raw]
        if missing:
            raise EventError(
                f"An event lacks the fields {missing}; it has {sorted(raw)}. It was "
                f"not written by ft_notebook, or the journal is damaged."
            )
        known = {f: raw[f] for f in _ENVELOPE_FIELDS if f in raw}
        known["data"] = dict(known.get("data") or {})
        extra = {k: v for k, v in raw.items() if k not in _ENVELOPE_FIELDS}
        return cls(**known, extra=extra)

    def payload(self) -> EventPayload | None:
        """The typed payload, or None for a kind this version does not know."""
        return payload_of(self.kind, self.data)


_ENVELOPE_FIELDS = ("seq", "topic", "kind", "time", "run", "worker", "generation", "step", "data")
_REQUIRED = ("seq", "topic", "kind", "time", "data")


#: The kind of an event published as a plain mapping (``publish({"hello": 1}, topic)``).
PLAIN_KIND = "published"


def publish(
    payload: EventPayload | Mapping[str, Any],
    topic: str,
    *,
    run: str | None = None,
    worker: str | None = None,
    generation: int | None = None,
    step: int | None = None,
    via: Any = None,
) -> Event:
    """Journal ``payload`` under ``topic`` and deliver it live; return the event.

    ``payload`` is one of the typed payloads (:class:`WorkerLost`, ...) or, for your
    own events, a mapping of JSON values, which travels as kind ``"published"``.

    ``via`` is a Dask ``Client``, ``Scheduler`` or ``Worker`` to send through; by
    default (config ``events.transport: auto``) the worker or default client of this
    process, if any.
    """
    from ft_notebook import _delivery

    def make(seq: int) -> Event:
        return event_of(
            payload, topic, seq=seq, run=run, worker=worker, generation=generation, step=step
        )

    return _delivery.publish(topic, make, via=via)


def event_of(
    payload: EventPayload | Mapping[str, Any],
    topic: str,
    *,
    seq: int = 0,
    run: str | None = None,
    worker: str | None = None,
    generation: int | None = None,
    step: int | None = None,
    at: float | None = None,
) -> Event:
    """``payload`` in its envelope, stamped ``at`` (default: now); ``seq`` 0 is an
    event no journal numbered (one that could not be published, or one a pure
    decision folds before it is published)."""
    kind, data = _kind_and_data(payload, topic)
    return Event(
        topic=topic,
        kind=kind,
        seq=seq,
        time=time.time() if at is None else at,
        run=run,
        worker=worker,
        generation=generation,
        step=step,
        data=data,
    )


def _kind_and_data(payload: object, topic: str) -> tuple[str, dict[str, Any]]:
    if isinstance(payload, EventPayload):
        return payload.kind, data_of(payload)
    if not isinstance(payload, Mapping):
        raise EventError(
            f"publish() takes a typed payload (WorkerLost(...), ...) or a dict of JSON "
            f"values, got {type(payload).__name__} {payload!r:.80} for topic {topic!r}."
        )
    # the journal refuses values JSON cannot carry, before anything is written
    return PLAIN_KIND, dict(payload)


def subscribe(
    topic: str,
    callback: Callable[[Event], object],
    *,
    since: int = 0,
    via: Any = None,
) -> Subscription:
    """Call ``callback`` for every event of ``topic`` after ``since``, once, in order.

    The journal is replayed first, then the live tail follows. ``via`` is a Dask
    ``Client`` for events published elsewhere in the cluster; without one the
    in-process bus carries the live tail. Close the returned subscription to stop.
    """
    from ft_notebook import _delivery

    return _delivery.subscribe(topic, callback, since=since, via=via)


def history(
    topic: str | None = None, *, run: str | None = None, since: int = 0, via: Any = None
) -> list[Event]:
    """Every event of ``topic`` (or of ``run``) after ``since``, in order.

    Read from the journal; with ``via`` (a Client) also from the scheduler's recent
    events, for publishers on other machines.
    """
    from ft_notebook import _delivery

    if (topic is None) == (run is None):
        raise TypeError("history() takes a topic or run=..., not both")
    return _delivery.history(topic if topic is not None else run_topic(run or ""), since, via)
