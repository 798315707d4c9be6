"""Live connections in the namespace: not saved, said once, with how to reconnect.

A Dask ``Client`` holds sockets and asyncio tasks, so pickle cannot carry it and no
snapshot can bring it back; nor should one: what it connects to lives on without
the kernel. Reported as an error at every save ("cannot pickle '_asyncio.Task'"),
it looked like a fault of the snapshot, so it is named for what it is, with the
line that reconnects, at the first snapshot that sees it and at the restore.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

#: How the reason of a live connection begins (so that it is said only once).
LIVE_CONNECTION = "a live connection"


def connection_reason(value: Any) -> str | None:
    """Why ``value`` is not saved, if it is a live Dask client; else None."""
    distributed = sys.modules.get("distributed")  # never imported here for this
    if distributed is None or not isinstance(value, distributed.Client):
        return None
    try:
        address = str(value.scheduler.address)
    except Exception:  # a client never connected, or closed
        address = "?"
    return (
        f"{LIVE_CONNECTION} to the Dask scheduler at {address}, not saved: the cluster "
        f"goes on without this kernel; after a restore reconnect with "
        f"`client = ft.cluster()` (your cluster; name=... for another) or "
        f"`Client({address!r})`"
    )


def unsaid(
    lost: Iterable[str], entries: Mapping[str, Any], changed: Iterable[str]
) -> dict[str, str]:
    """Why each of ``lost`` was not saved, less a live connection already reported:
    one that is not new or rebound since the previous snapshot (not in ``changed``)."""
    fresh = set(changed)
    return {
        name: entries[name].reason
        for name in lost
        if name in fresh or not entries[name].reason.startswith(LIVE_CONNECTION)
    }
