"""Drills on one replica (``replica:SERVICE/i``): slow it down, or undo that.

Killing or hanging a replica is killing or hanging its worker
(:mod:`ft_notebook.cluster.chaos`); a slow replica is one whose model calls take
``ms`` longer on a ``fraction`` of calls, what hedging is for.
"""

from __future__ import annotations

from typing import Any

from ft_notebook.exceptions import ServeError
from ft_notebook.serve._protocol import ServiceAction

PREFIX = "replica:"


def parse_target(target: str) -> tuple[str, int]:
    """``replica:SERVICE/i`` (or ``SERVICE/i``) as (service, index)."""
    text = target[len(PREFIX) :] if target.startswith(PREFIX) else target
    service, _, index = text.rpartition("/")
    if not service or not index.isdigit():
        raise ServeError(
            f"{target!r} names no replica: write replica:SERVICE/INDEX, e.g. replica:mlp/0."
        )
    return service, int(index)


def replica_row(client: Any, target: str) -> dict[str, Any]:
    """The service table's row of the replica ``target`` names, on a worker now."""
    service, index = parse_target(target)
    table = client.sync(client.scheduler.ft_service, action=ServiceAction.TABLE.value, name=service)
    row = next((r for r in table["replicas"] if r["index"] == index), None)
    if row is None or not row["address"]:
        states = {r["replica"]: r["state"] for r in table["replicas"]}
        raise ServeError(f"Replica {service}/{index} is not on a worker now ({states}).")
    return dict(row)


def slow_replica(client: Any, target: str, ms: float, fraction: float = 1.0) -> dict[str, Any]:
    """Make ``ms`` milliseconds of delay part of ``fraction`` of the replica's calls
    (``ms=0`` resumes it); returns the replica's row of the service table."""
    if ms < 0 or not 0 < fraction <= 1:
        raise ServeError(f"slow takes ms >= 0 and 0 < fraction <= 1, got {ms!r} and {fraction!r}.")
    row = replica_row(client, target)
    answer = client.sync(
        client.rpc(row["address"]).ft_serve_slow,
        key=row["replica"],
        seconds=ms / 1000.0,
        fraction=fraction,
    )
    if answer == "none":
        raise ServeError(f"Replica {row['replica']} is gone from worker {row['worker']}.")
    return dict(row)
