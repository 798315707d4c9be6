"""The workers of a cluster as its control plane knows them, and the row of each.

A :class:`Member` is one worker *name*: a worker restarted by its nanny comes back
with a new address and pid under the same name and stays one member (its
``restarts`` counted); a lost one is kept, as ``lost``, until it rejoins.
:func:`status_row` is the one shape a worker is reported in (``%ft cluster status``
and ``ft-notebook cluster status`` read it into :class:`~._status.WorkerStatus`; a
training run's progress reads it too), whether it comes from the
:class:`~._control.ControlPlane` or, on a scheduler without one, from what the
scheduler alone knows (:mod:`._remote`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from distributed.comm.addressing import get_address_host

from ft_notebook.cluster._health import HEALTH_METRIC


class MemberState(str, enum.Enum):
    """A worker as the control plane sees it: RUNNING ─► HUNG ─► LOST ─► RUNNING."""

    RUNNING = "running"
    HUNG = "hung"
    LOST = "lost"


@dataclass
class Member:
    """One worker name, as its newest incarnation (the control plane updates it)."""

    name: str
    address: str
    host: str
    pid: int | None
    nanny: str | None
    gpu: str | None
    joined: float
    state: MemberState = MemberState.RUNNING
    cause: str = ""
    lost_at: float | None = None
    #: How many times a worker of this name joined before this incarnation.
    restarts: int = 0


def status_row(m: Member, ws: Any, now: float) -> dict[str, Any]:
    """``m`` as a row of plain values; ``ws`` is its live ``WorkerState`` (None when
    it is lost), which gives the heartbeat's age, memory and tasks."""
    health = ((ws.metrics or {}).get(HEALTH_METRIC) if ws is not None else None) or {}
    return {
        "name": m.name,
        "address": m.address,
        "pid": m.pid,
        "gpu": m.gpu,
        "state": m.state.value,
        "heartbeat_age_s": round(now - ws.last_seen, 3) if ws is not None else None,
        "rss": health.get("rss") or ((ws.metrics or {}).get("memory") if ws else None),
        "memory_limit": ws.memory_limit if ws is not None else None,
        "tasks": len(ws.processing) if ws is not None else 0,
        "restarts": m.restarts,
        "cause": m.cause,
        "gpu_health": health.get("gpu"),
    }


def address_host(address: str) -> str:
    try:
        return str(get_address_host(address))
    except ValueError:  # an address of a transport without hosts
        return ""


def name_key(name: str) -> tuple[int, str]:
    """Worker names in a natural order: "2" before "10"."""
    return (int(name), "") if name.isdigit() else (1 << 30, name)
