"""A service's dashboard: a tile per replica, the tier badge with its reason, and
requests/s, p50/p99 and the fallback's share over time.

:class:`ServiceState` holds two things. What the service's events say (its replicas,
where they are and why one is gone, its wanted count and tier changes) is a
:class:`~ft_notebook.runfold.ServiceView`, the fold the JupyterLab panel reads too,
fed by :meth:`ServiceState.add`. What only this caller knows (its breakers, requests
in flight, latencies, counts and the tier its answers carry) comes from snapshots of
its router's ``status()`` (plain dicts), folded by :meth:`ServiceState.apply`.
:class:`ServiceDashboard` follows the service's topic (the journal first), polls the
router in a daemon thread, and shows the state in an ipywidgets ``HTML`` that it
updates in place.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ft_notebook.events import Event
from ft_notebook.runfold import SERVICE_KINDS, ServiceView
from ft_notebook.widgets._state import escape

#: Points of the time series kept (a point per poll).
MAX_POINTS = 600
_COLOURS = {"HEALTHY": "#2e7d32", "DEGRADED": "#ef6c00", "FALLBACK": "#c62828"}


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
    cause: str = ""


@dataclass
class ServiceState:
    name: str
    #: The service's events folded (the panel's fold too).
    view: ServiceView = field(default_factory=ServiceView)
    #: The tier this caller's answers carry, and why (its router's; before a first
    #: snapshot, the coordinator's from the events).
    tier: str = "FALLBACK"
    reason: str = ""
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
            tile = ReplicaTile(fact.replica, fact.worker, fact.state.upper(), cause=fact.cause)
            mine = self.routed.get(fact.replica)
            if mine:
                tile.breaker = str(mine["breaker"])
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
            breaker = f", breaker {t.breaker}" if t.breaker else ""
            lines.append(
                f"  {t.replica} on worker {t.worker or '-'}: {t.state}{breaker}, "
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
        colour = _COLOURS.get(self.tier, "#555")
        tiles = "".join(_tile_html(t) for t in self.tiles.values())
        chart = _chart(self.series)
        counts = ", ".join(f"{escape(k)} {v}" for k, v in self.counts.items())
        return (
            f'<div class="ft-service"><div><b>service {escape(self.name)}</b> '
            f'<span class="ft-badge" style="background:{colour};color:#fff;padding:0 6px;'
            f'border-radius:3px">{escape(self.tier)}</span> '
            f"<span>{escape(self.reason)}</span></div>"
            f'<div style="display:flex;gap:6px;margin:4px 0">{tiles}</div>'
            f'{chart}<div style="font-size:smaller">{counts}</div></div>'
        )


_COUNTS = ("requests", "answered", "fallback", "retries", "hedges", "shed", "failed")


def _ms(seconds: Any) -> float | None:
    return None if seconds is None else float(seconds) * 1e3


def _fmt(ms: float | None) -> str:
    return "?" if ms is None else f"{ms:.1f}"


def _tile_html(t: ReplicaTile) -> str:
    routed = t.state == "READY" and t.breaker in ("", "CLOSED")
    colour = "#2e7d32" if routed else ("#ef6c00" if t.state in ("READY", "WARMING") else "#c62828")
    lat = f"p50 {_fmt(t.p50_ms)} / p99 {_fmt(t.p99_ms)} ms" if t.p50_ms is not None else ""
    why = f"<br><i>{escape(t.cause)}</i>" if t.cause and not routed else ""
    return (
        f'<div class="ft-replica" style="border:2px solid {colour};padding:2px 6px;'
        f'border-radius:4px"><b>{escape(t.replica)}</b> ({escape(t.worker or "-")})<br>'
        f"{escape(t.state)} {escape(t.breaker)}<br>{t.inflight} in flight, "
        f"{t.errors} errors<br>{lat}{why}</div>"
    )


def _chart(series: list[tuple[float, float, float | None, float | None, float]]) -> str:
    """Requests/s, p99 and fallback share as three inline SVG lines, each scaled to
    its own maximum (the numbers of the last point are beside it)."""
    if len(series) < 2:
        return ""
    width, height = 360, 60
    t0, t1 = series[0][0], series[-1][0]
    span = (t1 - t0) or 1.0

    def line(values: Sequence[float | None], colour: str) -> str:
        top = max((v for v in values if v is not None), default=0.0) or 1.0
        points = " ".join(
            f"{(t - t0) / span * width:.1f},{height - (v or 0.0) / top * (height - 4):.1f}"
            for (t, *_), v in zip(series, values, strict=True)
        )
        return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>'

    rps = [p[1] for p in series]
    p99 = [p[3] for p in series]
    share = [p[4] for p in series]
    _, last_rps, _, last_p99, last_share = series[-1]
    return (
        f'<svg width="{width}" height="{height}" class="ft-service-chart">'
        f"{line(rps, '#1565c0')}{line(p99, '#6a1b9a')}{line(share, '#c62828')}</svg>"
        f'<div style="font-size:smaller"><span style="color:#1565c0">{last_rps:.0f} req/s</span>'
        f' · <span style="color:#6a1b9a">p99 {_fmt(last_p99)} ms</span>'
        f' · <span style="color:#c62828">fallback {last_share:.0%}</span></div>'
    )


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
            import ipywidgets  # type: ignore[import-untyped]

            self.view = ipywidgets.HTML()
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
                self.view.value = self.state.html()

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
