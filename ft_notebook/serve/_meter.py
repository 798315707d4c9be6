"""A caller's traffic, published: what its router did in each window of about 2 s.

What a service was asked and how fast it answered is known only in each caller, by
its router; the panel, the docked dashboard and the status bar read a service from
its events (:class:`ft_notebook.runfold.ServiceView`). So each caller publishes its
windows as ``service-traffic`` events (:class:`~ft_notebook.events.ServiceTraffic`),
and every view sums the same windows: the Jupyter server's own router is one caller
among the notebooks', no longer the only one the panel sees.

Guarantees:
- nothing on the request path: a call costs what it did. On the router's loop the
  meter wakes every ``window_s / 4``, and a window of ``window_s`` or more is what
  the router's counts (kept anyway) moved since the last one, with the p50 and p99
  of the answers it added to its latency window (the newest 512 of them, when the
  window had more);
- at most one event per window, none for a window without requests; stopping
  publishes the last window, however short;
- journaling and sending run in a thread, never on the loop (an append takes a
  file lock, a client's sync call cannot run on its own loop); a publish that fails
  is logged and the router goes on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from ft_notebook.events import ServiceTraffic, publish, service_topic

logger = logging.getLogger(__name__)

#: Seconds of one window (the fold's buckets are as long).
WINDOW_S = 2.0
_ids = itertools.count(1)


class TrafficMeter:
    """Windows of ``router``'s traffic, handed to ``send`` (see :func:`publisher`)."""

    def __init__(
        self,
        router: Any,
        send: Callable[[ServiceTraffic], None],
        *,
        window_s: float = WINDOW_S,
        caller: str | None = None,
    ) -> None:
        self.router, self.send, self.window_s = router, send, window_s
        self.caller = caller or f"{socket.gethostname()}:{os.getpid()}:{next(_ids)}"
        self._task: asyncio.Task[None] | None = None
        self._begin(time.monotonic(), time.time())

    def _begin(self, mono: float, wall: float) -> None:
        self._since, self._start = mono, wall
        self._counts = dict(self.router.counts)
        self._served = {k: v.served for k, v in self.router.views.items()}

    def window(self, *, final: bool = False) -> ServiceTraffic | None:
        """The window since the last one if it is ``window_s`` long (any length when
        ``final``) and had requests; taking it, or passing a quiet one, starts the next."""
        mono, wall = time.monotonic(), time.time()
        if not final and mono - self._since < self.window_s:
            return None
        counts = self.router.counts
        moved = {k: n - self._counts.get(k, 0) for k, n in counts.items()}
        by_replica = {}
        for key, view in list(self.router.views.items()):
            before = self._served.get(key, 0)
            n = view.served - before if view.served >= before else view.served  # a new view
            if n > 0:
                by_replica[key] = n
        start = self._start
        self._begin(mono, wall)
        requests, failed = moved.get("requests", 0), moved.get("failed", 0) + moved.get("shed", 0)
        if requests <= 0 and failed <= 0:
            return None
        took = sorted(self.router.latencies.newest(moved.get("answered", 0)))
        return ServiceTraffic(
            caller=self.caller,
            start=start,
            end=wall,
            requests=requests,
            by_replica=by_replica,
            fallback=moved.get("fallback", 0),
            failed=failed,
            p50_s=_quantile(took, 0.5),
            p99_s=_quantile(took, 0.99),
        )

    async def start(self) -> None:
        """Begin publishing, on the router's loop."""
        self._begin(time.monotonic(), time.time())
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop, publishing the last window if it had requests."""
        if self._task is None:
            return
        self._task.cancel()
        self._task = None
        await self._publish(self.window(final=True))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.window_s / 4)
            await self._publish(self.window())

    async def _publish(self, payload: ServiceTraffic | None) -> None:
        if payload is None:
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self.send, payload)
        except Exception:  # the service goes on; its traffic is a view's, not a call's
            logger.exception("could not publish the traffic of %s", self.router.name)


def publisher(client: Any, name: str) -> Callable[[ServiceTraffic], None]:
    """What publishes service ``name``'s windows, through ``client`` (a sync one)."""
    topic = service_topic(name)

    def send(payload: ServiceTraffic) -> None:
        publish(payload, topic, via=client)

    return send


def _quantile(ordered: list[float], q: float) -> float | None:
    """As :meth:`~._policy.Latencies.quantile` reads its window."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
