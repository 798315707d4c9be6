"""The run coordinator's hold on the scheduler it lives in.

:class:`SchedulerLink` owns what every part of the coordinator reaches the cluster
through: the scheduler (for publishing and for calling workers), the control plane
(membership, rendezvous store, holds, status rows) and the coordinator's background
tasks. Both are set when the plugin starts; until then (in unit tests) they are
whatever a test puts there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from ft_notebook.cluster.plugins import name_key
from ft_notebook.train.protocol import RankOp

# one logger for every part of the coordinator: its logs are configured in one place
logger = logging.getLogger("ft_notebook.train.coordinator._plugin")


class SchedulerLink:
    """Calls to workers, running workers, and the coordinator's background tasks."""

    def __init__(self) -> None:
        self.scheduler: Any = None
        self.control: Any = None  # the cluster's ControlPlane
        self.tasks: set[asyncio.Task[Any]] = set()

    def workers(self) -> dict[str, str]:
        """Running workers: name -> address, in name order."""
        found = {str(ws.name): addr for addr, ws in self.scheduler.workers.items()}
        return dict(sorted(found.items(), key=lambda kv: name_key(kv[0])))

    async def call(self, address: str, op: RankOp, **kwargs: Any) -> Any:
        """The rank handler ``op`` on the worker at ``address``; raises when the worker
        does not answer."""
        return await getattr(self.scheduler.rpc(address), op.value)(**kwargs)

    def spawn(self, coro: Awaitable[Any]) -> None:
        """Run ``coro`` in the background; a failure is logged, never lost."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self.tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                logger.error("run coordinator task failed", exc_info=t.exception())

        task.add_done_callback(done)

    def cancel_tasks(self) -> None:
        for task in list(self.tasks):
            task.cancel()
