"""What a caller's router knows of a service's replicas, and the tier they make.

The coordinator's table (:mod:`._coordinator`) says which replicas are ready; a
:class:`Rotation` keeps a :class:`ReplicaView` of each, with its circuit breaker, and
follows the coordinator three ways: it reads the table again every ``_REFRESH_S``;
it takes a replica out at once when the coordinator pushes that its worker is lost
(:meth:`Rotation.lost`); and it pings each replica every ``health_interval_s``: one
that gives no answer within ``health_timeout_s`` leaves, one whose breaker is open
and that answers again rejoins, even while no request comes to probe it. The tier is
counted over the replicas in rotation (:func:`~._policy.tier_of`), and each change
of it is kept with its reason.

It runs on the Dask client's event loop, as the router (:mod:`._router`) does; the
router sends the requests, and reports here what they found.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from ft_notebook._reasons import Reason, explain
from ft_notebook.events import Health
from ft_notebook.serve._policy import CircuitBreaker, Latencies, tier_of
from ft_notebook.serve._protocol import ReplicaState, ServiceAction

#: Seconds between two reads of the coordinator's table.
_REFRESH_S = 0.5
#: Tier changes kept, newest last.
_TRANSITIONS = 100


class ReplicaView:
    """What the router knows of one replica."""

    def __init__(self, row: dict[str, Any], failures: int, open_s: float) -> None:
        self.key, self.index = str(row["replica"]), int(row["index"])
        self.worker, self.address = str(row["worker"]), str(row["address"])
        self.incarnation = str(row["incarnation"])
        self.breaker = CircuitBreaker(failures, open_s)
        self.inflight = 0
        self.served = self.errors = 0
        self.latencies = Latencies()
        self.attempts: set[asyncio.Task[Any]] = set()
        self.ping: asyncio.Task[None] | None = None  # the health check in flight
        self.since: list[float] = []  # when each call in flight was sent
        #: a request that lost a replica is in flight here (one at most, unless it forks)
        self.suspect = False
        #: suspects and hedges run in a fork of its process (a CPU replica on Linux, as
        #: its pings say): one that is poison cannot take the replica down
        self.forks = False
        #: the requests with an attempt here whose outcome they have not handled yet
        self.holders: set[Any] = set()
        #: the raw error behind the breaker's reason (a tooltip's), "" when none
        self.detail = ""

    def stalled(self, now: float, late: float) -> bool:
        return bool(self.since) and now - min(self.since) > late

    def row(self) -> dict[str, Any]:
        return {
            "replica": self.key,
            "worker": self.worker,
            "breaker": self.breaker.state.value,
            "reason": self.breaker.reason,
            "detail": self.detail,
            "inflight": self.inflight,
            "served": self.served,
            "errors": self.errors,
            "p50_s": self.latencies.quantile(0.5),
            "p99_s": self.latencies.quantile(0.99),
        }


class Rotation:
    """The replicas one router may send to, by key, and the tier they make."""

    def __init__(self, client: Any, name: str, settings: Any, wanted: int) -> None:
        self.client, self.name, self.settings = client, name, settings
        self.wanted = wanted
        self.views: dict[str, ReplicaView] = {}  # by replica key
        self.version = -1
        self.tier, self.tier_reason = Health.FALLBACK, "no replica known yet"
        self.tier_detail = ""  # the raw error behind tier_reason, "" when none
        self.transitions: list[dict[str, Any]] = []
        self._loops: list[asyncio.Task[Any]] = []
        #: called with a replica as it leaves the rotation, before its calls are cancelled
        self.on_lost: Callable[[ReplicaView], None] = lambda view: None
        self.closed = False

    # ---- the replica table

    async def start(self) -> None:
        await self.refresh()
        self._loops = [
            asyncio.ensure_future(self._refresh_loop()),
            asyncio.ensure_future(self._health_loop()),
        ]

    async def stop(self) -> None:
        self.closed = True
        for task in self._loops:
            task.cancel()

    async def refresh(self) -> None:
        table = await self.client.scheduler.ft_service(
            action=ServiceAction.TABLE.value, name=self.name
        )
        self.apply(table)

    def apply(self, table: dict[str, Any]) -> None:
        if table["version"] < self.version:
            return
        self.version, self.wanted = table["version"], int(table["wanted"])
        ready = {r["replica"]: r for r in table["replicas"] if r["state"] == ReplicaState.READY}
        for key, view in list(self.views.items()):
            row = ready.get(key)
            if row is None or row["incarnation"] != view.incarnation:
                self.eject(view, "no longer a ready replica")
                del self.views[key]
        s = self.settings
        for key, row in ready.items():
            if key not in self.views:
                self.views[key] = ReplicaView(row, s.breaker_failures, s.breaker_open_s)
        self.retier("replica table")

    def lost(self, address: str, cause: str, detail: str = "") -> None:
        """The coordinator's word that a replica's worker is gone: out at once."""
        reason = Reason(cause, detail)
        for key, view in list(self.views.items()):
            if view.address == address:
                self.eject(view, reason)
                del self.views[key]
        self.retier(reason)

    def eject(self, view: ReplicaView, reason: str | Reason) -> None:
        """Out of rotation at once; its requests in flight are cancelled, to be re-sent."""
        self.on_lost(view)
        reason = reason if isinstance(reason, Reason) else Reason(reason)
        view.breaker.failed(reason.text, at_once=True)
        view.detail = reason.detail
        for task in list(view.attempts):
            task.cancel()  # its requests go elsewhere

    def retier(self, reason: str | Reason) -> None:
        """Count the replicas in rotation again; a change of tier is kept with ``reason``
        (words; a :class:`Reason`'s detail is kept beside them)."""
        serving = sum(1 for v in list(self.views.values()) if v.breaker.in_rotation())
        tier = tier_of(serving, self.wanted)
        if tier is not self.tier:
            reason = reason if isinstance(reason, Reason) else Reason(reason)
            why = f"{serving} of {self.wanted} replicas in rotation: {reason.text}"
            self.transitions.append(
                {"time": time.time(), "tier": tier.value, "reason": why, "detail": reason.detail}
            )
            del self.transitions[:-_TRANSITIONS]
            self.tier, self.tier_reason, self.tier_detail = tier, why, reason.detail

    async def _refresh_loop(self) -> None:
        while not self.closed:
            await asyncio.sleep(_REFRESH_S)
            try:
                await self.refresh()
            except Exception:  # the scheduler is away for a moment: keep the old table
                continue

    # ---- health checks

    async def _health_loop(self) -> None:
        while not self.closed:
            await asyncio.sleep(self.settings.health_interval_s)
            for view in list(self.views.values()):
                if view.ping is None:
                    view.ping = asyncio.ensure_future(self._ping(view))

    async def answers(self, view: ReplicaView) -> bool:
        """Whether ``view``'s replica answers a ping now, ready, within the health
        timeout (one ping, outside the health loop)."""
        try:
            found = await asyncio.wait_for(
                self.client.rpc(view.address).ft_serve_ping(key=view.key),
                self.settings.health_timeout_s,
            )
        except Exception:
            return False
        return bool(
            found.get("incarnation") == view.incarnation
            and found.get("state") == ReplicaState.READY
        )

    async def _ping(self, view: ReplicaView) -> None:
        try:
            found = await asyncio.wait_for(
                self.client.rpc(view.address).ft_serve_ping(key=view.key),
                self.settings.health_timeout_s,
            )
            if (
                found.get("incarnation") != view.incarnation
                or found.get("state") != ReplicaState.READY
            ):
                self.eject(view, f"the replica is {found.get('state')} on its worker")
            else:
                view.forks = bool(found.get("forks")) and self.settings.sandbox
                if not view.breaker.in_rotation() and view.breaker.allows():
                    # open for its time and answering again: the ping is its half-open
                    # probe, so a replica back from a hang rejoins while no request comes
                    view.breaker.succeeded()
        except Exception as e:
            limit = f"{self.settings.health_timeout_s:g} s"
            if isinstance(e, asyncio.TimeoutError):
                reason = Reason(
                    f"replica {view.index} did not answer a health check within {limit}",
                    f"TimeoutError: no answer to ft_serve_ping within {limit}",
                )
            else:
                said = explain(e, replica=view.index)
                reason = Reason(f"health check failed: {said.text}", said.detail, said.kind)
            self.eject(view, reason)
        finally:
            view.ping = None
            self.retier("health check")
