"""Functions a client runs inside the scheduler (``client.run_on_scheduler``).

They are module-level so Dask sends them by reference; each finds the
:class:`~ft_notebook.cluster._control.ControlPlane` of the scheduler it runs in, or
(for status) falls back to what the scheduler alone knows.
"""

from __future__ import annotations

import time
from typing import Any

from ft_notebook.cluster._control import PLUGIN_NAME, ControlPlane, control_plane
from ft_notebook.cluster._members import Member, address_host, status_row


def scheduler_rows(dask_scheduler: Any) -> list[dict[str, Any]]:
    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    if isinstance(plugin, ControlPlane):
        return plugin.rows()
    now = time.time()  # no plugin: what the scheduler alone knows
    return [
        status_row(Member(str(ws.name), a, address_host(a), ws.pid, ws.nanny, None, 0.0), ws, now)
        for a, ws in sorted(dask_scheduler.workers.items(), key=lambda kv: str(kv[1].name))
    ]


def scheduler_workers(dask_scheduler: Any) -> list[dict[str, Any]]:
    return [
        {"name": str(ws.name), "address": a, "nanny": ws.nanny, "pid": ws.pid}
        for a, ws in dask_scheduler.workers.items()
    ]


async def scheduler_rendezvous(dask_scheduler: Any) -> tuple[str, int]:
    return await control_plane(dask_scheduler).rendezvous_store()


def scheduler_hold(dask_scheduler: Any, key: str, held: bool) -> list[str]:
    plugin = control_plane(dask_scheduler)
    if held:
        plugin.hold(key)
    else:
        plugin.release(key)
    return sorted(plugin.holds)
