"""A service's dashboard: a tile per replica, the tier badge with its reason, and
requests/s, p50/p99 and the fallback's share over time.

:class:`ServiceState` holds two things. What the service's events say (its replicas,
where they are and why one is gone, its wanted count and tier changes) is a
:class:`~ft_notebook.runfold.ServiceView`, the fold the JupyterLab panel reads too,
fed by :meth:`ServiceState.add`. What only this caller knows (its breakers, requests
in flight, latencies, counts and the tier its answers carry) comes from snapshots of
its router's ``status()`` (plain dicts), folded by :meth:`ServiceState.apply`.
:class:`ServiceDashboard` follows the service's topic (the journal first), polls the
router in a daemon thread, and shows the state as ipywidgets with a bokeh chart
(:mod:`._service_view`) that it updates in place, or as HTML (:mod:`._service_html`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ft_notebook.events import Event
from ft_notebook.runfold import SERVICE_KINDS, ServiceView

#: Points of the time series kept (a point per poll).
MAX_POINTS = 600


@dataclass
class ReplicaTile:
    replica: str
    worker: str = ""
    state: str = "WAITING"  # from the events: WAITING, READY, LOST, FAILED
    breaker: str = ""  # this caller's: CLOSED, OPEN, HALF_OPEN; "" if not routed here
    inflight: int = 0
    served: int = 0
    errors: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    #: why it is lost or failed, in words, and the raw error behind them (a tooltip's)
    cause: str = ""
    detail: str = ""
    #: why this caller's breaker opened, in words, and the raw error behind them
    breaker_reason: str = ""
    breaker_detail: str = ""

    @property
    def index(self) -> str:
        return self.replica.rsplit("/", 1)[-1]

    def chip(self) -> str:
        """Its name and state, read as one replica's (``replica 0: ready``)."""
        return f"replica {self.index}: {self.state.lower()}"

    def breaker_label(self) -> str:
        """This caller's circuit breaker, said as one (``breaker closed``); "" if not
        routed here."""
        return f"breaker {self.breaker.lower().replace('_', '-')}" if self.breaker else ""


@dataclass
class ServiceState:
    name: str
    #: The service's events folded (the panel's fold too).
    view: ServiceView = field(default_factory=ServiceView)
    #: The tier this caller's answers carry, and why (its router's; before a first
    #: snapshot, the coordinator's from the events).
    tier: str = "FALLBACK"
    reason: str = ""
    #: The raw error behind the reason ("" when the reason is all there is).
    detail: str = ""
    #: This caller's router, by replica: breaker, in flight, served, errors, p50, p99.
    routed: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: (time, requests/s, p50 ms, p99 ms, fallback share) per snapshot after the first.
    series: list[tuple[float, float, float | None, float | None, float]] = field(
        default_factory=list
    )
    counts: dict[str, int] = field(default_factory=dict)
    version: int = 0
    _last: tuple[float, int, int] | None = None  # time, requests, fallback answers
    _snapshots: int = 0

    def __post_init__(self) -> None:
        if not self.view.name:
            self.view = ServiceView(self.name)

    def add(self, event: Event) -> bool:
        """Fold one event of the service's topic; returns whether the view moved."""
        if event.kind not in SERVICE_KINDS:
            return False
        before, self.view = self.view, self.view.apply(event)
        if not self._snapshots and self.view.health is not None:
            self.tier, self.reason = self.view.health.value, self.view.reason
            self.detail = self.view.detail
        self.version += 1
        return self.view is not before

    def apply(self, router: dict[str, Any], now: float | None = None) -> bool:
        """Fold one snapshot of this caller's ``router.status()``; returns whether
        anything shown changed."""
        now = time.time() if now is None else now
        before = (self.tier, self.reason, repr(self.routed), self.counts)
        self._snapshots += 1
        self.tier = str(router.get("tier") or self.tier)
        self.reason = str(router.get("reason") or "")
        self.detail = str(router.get("detail") or "")
        self.routed = {str(r["replica"]): dict(r) for r in router.get("replicas", ())}
        requests, fallback = int(router.get("requests", 0)), int(router.get("fallback", 0))
        self.counts = {k: int(router[k]) for k in _COUNTS if k in router}
        if self._last is not None and now > self._last[0]:
            dt, asked = now - self._last[0], requests - self._last[1]
            share = (fallback - self._last[2]) / asked if asked > 0 else 0.0
            point = (now, asked / dt, _ms(router.get("p50_s")), _ms(router.get("p99_s")), share)
            self.series.append(point)
            del self.series[:-MAX_POINTS]
        self._last = (now, requests, fallback)
        self.version += 1
        changed = before != (self.tier, self.reason, repr(self.routed), self.counts)
        return changed or bool(self.series)

    @property
    def tiles(self) -> dict[str, ReplicaTile]:
        """A tile per replica the service wants: its facts from the events, this
        caller's numbers beside them."""
        tiles = {}
        for fact in self.view.replica_rows():
            tile = ReplicaTile(
                fact.replica, fact.worker, fact.state.upper(), cause=fact.cause, detail=fact.detail
            )
            mine = self.routed.get(fact.replica)
            if mine:
                tile.breaker = str(mine["breaker"])
                tile.breaker_reason = str(mine.get("reason") or "")
                tile.breaker_detail = str(mine.get("detail") or "")
                tile.inflight, tile.served = int(mine["inflight"]), int(mine["served"])
                tile.errors = int(mine["errors"])
                tile.p50_ms, tile.p99_ms = _ms(mine.get("p50_s")), _ms(mine.get("p99_s"))
            tiles[fact.replica] = tile
        return tiles

    # ---- what to show

    def text(self) -> str:
        lines = [f"service {self.name!r}: {self.tier} ({self.reason})".rstrip()]
        if self.view.wanted:
            lines.append(f"  {self.view.ready} of {self.view.wanted} replicas ready")
        for t in self.tiles.values():
            lat = f", p50 {t.p50_ms:.1f} ms, p99 {t.p99_ms:.1f} ms" if t.p50_ms is not None else ""
            breaker = f", {t.breaker_label()}" if t.breaker else ""
            why = f" ({t.cause})" if t.cause else ""
            lines.append(
                f"  {t.chip()}{why} on worker {t.worker or '-'}{breaker}, "
                f"{t.inflight} in flight, {t.served} served, {t.errors} errors{lat}"
            )
        if self.series:
            _, rps, p50, p99, share = self.series[-1]
            lines.append(
                f"  now: {rps:.0f} requests/s, p50 {_fmt(p50)} ms, p99 {_fmt(p99)} ms, "
                f"{share:.0%} answered by the fallback"
            )
        if self.counts:
            lines.append("  " + ", ".join(f"{k} {v}" for k, v in self.counts.items()))
        return "\n".join(lines)

    def html(self) -> str:
        """The whole dashboard as HTML (non-widget front ends, nbconvert)."""
        from ft_notebook.widgets._service_html import service_html

        return service_html(self)


_COUNTS = ("requests", "answered", "fallback", "retries", "hedges", "shed", "failed")


def _ms(seconds: Any) -> float | None:
    return None if seconds is None else float(seconds) * 1e3


def _fmt(ms: float | None) -> str:
    return "?" if ms is None else f"{ms:.1f}"


class ServiceDashboard:
    """Follows the service's events and polls its router every ``period`` seconds in a
    daemon thread, and shows both.

    ``router_status`` is the caller's ``router.status`` (no call to the cluster);
    ``follow`` subscribes a callback to the service's topic, journal first, and returns
    the subscription (``close()``), or is None for no events.
    """

    def __init__(
        self,
        name: str,
        router_status: Callable[[], dict[str, Any]],
        follow: Callable[[Callable[[Event], None]], Any] | None = None,
        *,
        period: float = 0.5,
        widgets: bool = True,
    ) -> None:
        self.state = ServiceState(name)
        self._status, self._period = router_status, period
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.view: Any = None
        if widgets:
            from ft_notebook.widgets._service_view import ServiceDashboardView

            self.view = ServiceDashboardView(MAX_POINTS)
        self._subscription = follow(self._on_event) if follow is not None else None
        self.poll()
        self._thread = threading.Thread(target=self._loop, name="ft-notebook-service", daemon=True)
        self._thread.start()

    def _on_event(self, event: Event) -> None:
        with self._lock:
            self.state.add(event)

    def poll(self) -> None:
        status = self._status()
        with self._lock:
            self.state.apply(status)
            if self.view is not None:
                self.view.render(self.state)

    def _loop(self) -> None:
        while not self._closed.wait(self._period):
            try:
                self.poll()
            except Exception:  # the service or its cluster is gone: keep the last view
                if self._closed.is_set():
                    return

    def close(self) -> None:
        self._closed.set()
        if self._subscription is not None:
            self._subscription.close()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            bundle = {"text/plain": self.state.text(), "text/html": self.state.html()}
        if self.view is not None:
            widget = self.view._repr_mimebundle_(**kwargs) or {}
            bundle.update({k: v for k, v in widget.items() if k != "text/plain"})
        return bundle

    def __repr__(self) -> str:
        with self._lock:
            return self.state.text()
