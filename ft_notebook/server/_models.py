"""What the REST API returns: frozen dataclasses with a ``to_json``.

These are the models the labextension's TypeScript types are meant to be generated
from, so every field is a JSON value (numbers, strings, lists, objects, null) and a
change here is a change of the API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


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
class RunModel:
    """A training run seen in the journals, with its newest state."""

    name: str
    topic: str
    #: The newest ``run-state-changed`` state; None if the run published none yet.
    state: str | None
    #: Sequence number and time of the run's newest event (0 and 0.0 for none).
    last_seq: int
    updated: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["variables"] = list(self.variables)
        return out


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
