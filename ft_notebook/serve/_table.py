"""What the service coordinator keeps of each service: its :class:`Service` and the
:class:`Slot` of each replica (where it is placed, its state, what it told), and the
table that kernels, routers and the panel read of them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ft_notebook.events import Health
from ft_notebook.serve._protocol import ReplicaState


@dataclass
class Slot:
    """One replica of a service: where it is and how it is."""

    index: int
    worker: str = ""
    address: str = ""
    state: ReplicaState = ReplicaState.WAITING
    incarnation: str = ""
    since: float = field(default_factory=time.time)
    #: why it is lost or failed, in words; ``detail``: the raw error behind them
    cause: str = ""
    detail: str = ""
    tries: int = 0  # failed starts in a row on a live worker
    #: its model raised on every call of late (what the replica told), "" otherwise
    failing: str = ""

    def row(self, service: str) -> dict[str, Any]:
        return {
            "replica": f"{service}/{self.index}",
            "index": self.index,
            "worker": self.worker,
            "address": self.address,
            "state": self.state.value,
            "incarnation": self.incarnation,
            "since": self.since,
            "cause": self.cause,
            "detail": self.detail,
            "failing": self.failing,
        }


@dataclass
class Service:
    name: str
    factory: bytes
    example: bytes | None
    fallback: bytes | None
    wanted: int
    routing: dict[str, Any]
    slots: dict[int, Slot] = field(default_factory=dict)
    per_worker: int = 1
    health: Health = Health.FALLBACK
    reason: str = "no replica ready yet"
    detail: str = ""  # the raw error behind the reason, "" when none
    version: int = 0
    created: float = field(default_factory=time.time)
    #: Workers where the model factory failed, with the error: not tried again.
    failed_on: dict[str, str] = field(default_factory=dict)

    def table(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "wanted": self.wanted,
            "health": self.health.value,
            "reason": self.reason,
            "detail": self.detail,
            "version": self.version,
            "created": self.created,
            "replicas": [s.row(self.name) for s in sorted(self.slots.values(), key=_index)],
            "failed_on": dict(self.failed_on),
        }


def _index(slot: Slot) -> int:
    return slot.index
