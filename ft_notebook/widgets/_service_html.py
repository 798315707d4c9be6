"""A service dashboard's HTML: the tier with its reason, a chip per replica, the counts,
and (for front ends without widgets) a small chart of the rates.

Reasons are words made where the failure was seen (``ft_notebook._reasons``); the raw
error behind one is kept in a ``title`` (a tooltip) and in a collapsed "details" line,
never shown in its place. Every piece carries ``data-*`` attributes (replica, state,
breaker) so tests and tools read values, not styling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ft_notebook.widgets._state import escape

if TYPE_CHECKING:
    from ft_notebook.widgets._service import ReplicaTile, ServiceState

_TIER_COLOURS = {"HEALTHY": "#2e7d32", "DEGRADED": "#ef6c00", "FALLBACK": "#c62828"}
#: What each breaker state means for this caller's requests (the chip's tooltip).
BREAKER_MEANS = {
    "CLOSED": "requests go to this replica",
    "OPEN": "no requests go to this replica until it answers again",
    "HALF_OPEN": "one probe request is allowed through to see whether it answers",
}

Point = tuple[float, float, float | None, float | None, float]


def reason_html(text: str, detail: str, css: str = "ft-reason") -> str:
    """``text`` with ``detail`` as its tooltip and a collapsed details line."""
    if not text:
        return ""
    title = f' title="{escape(detail)}"' if detail else ""
    more = (
        '<details class="ft-detail" style="font-size:smaller;color:#555">'
        f'<summary>details</summary><code style="white-space:pre-wrap">{escape(detail)}</code>'
        "</details>"
        if detail
        else ""
    )
    return f'<span class="{css}"{title}>{escape(text)}</span>{more}'


def header_html(s: ServiceState) -> str:
    colour = _TIER_COLOURS.get(s.tier, "#555")
    ready = f" &middot; {s.view.ready} of {s.view.wanted} replicas ready" if s.view.wanted else ""
    return (
        f'<div class="ft-service-header" style="white-space:normal;line-height:1.4">'
        f"<b>service {escape(s.name)}</b> "
        f'<span class="ft-badge" data-health="{escape(s.tier)}" style="background:{colour};'
        f'color:#fff;padding:0 6px;border-radius:3px">{escape(s.tier)}</span>{ready}'
        f"<div>{reason_html(s.reason, s.detail)}</div></div>"
    )


def tile_html(t: ReplicaTile) -> str:
    """One replica's chip: ``replica 0: ready``, its worker, ``breaker closed``, this
    caller's numbers, and why it is out when it is."""
    routed = t.state == "READY" and t.breaker in ("", "CLOSED")
    colour = "#2e7d32" if routed else ("#ef6c00" if t.state in ("READY", "WARMING") else "#c62828")
    lines = [f'<b class="ft-chip">{escape(t.chip())}</b>', f"on worker {escape(t.worker or '-')}"]
    if t.breaker:
        means = BREAKER_MEANS.get(t.breaker, "")
        lines.append(
            f'<span class="ft-breaker" title="circuit breaker: {escape(means)}">'
            f"{escape(t.breaker_label())}</span>"
        )
    lines.append(f"{t.inflight} in flight &middot; {t.served} served &middot; {t.errors} errors")
    if t.p50_ms is not None:
        lines.append(f"p50 {_fmt(t.p50_ms)} ms &middot; p99 {_fmt(t.p99_ms)} ms")
    if t.cause and not routed:
        lines.append(reason_html(t.cause, t.detail, "ft-cause"))
    elif t.breaker not in ("", "CLOSED") and t.breaker_reason:
        lines.append(reason_html(t.breaker_reason, t.breaker_detail, "ft-cause"))
    return (
        f'<div class="ft-replica" data-replica="{escape(t.replica)}" '
        f'data-state="{escape(t.state)}" data-breaker="{escape(t.breaker)}" '
        f'style="border:2px solid {colour};padding:2px 6px;border-radius:4px;'
        f'max-width:260px;white-space:normal;line-height:1.4">{"<br>".join(lines)}</div>'
    )


def tiles_html(s: ServiceState) -> str:
    tiles = "".join(tile_html(t) for t in s.tiles.values())
    return f'<div style="display:flex;flex-wrap:wrap;gap:6px;margin:4px 0">{tiles}</div>'


def counts_html(s: ServiceState) -> str:
    counts = ", ".join(f"{escape(k)} {v}" for k, v in s.counts.items())
    return f'<div class="ft-counts" style="font-size:smaller">this caller: {counts}</div>'


def service_html(s: ServiceState) -> str:
    """The whole dashboard, the chart as a static SVG."""
    return (
        f'<div class="ft-service">{header_html(s)}{tiles_html(s)}'
        f"{chart_svg(s.series)}{counts_html(s)}</div>"
    )


def _fmt(ms: float | None) -> str:
    return "?" if ms is None else f"{ms:.1f}"


def chart_svg(series: Sequence[Point]) -> str:
    """Requests/s, p99 and fallback share as three inline SVG lines over the time of
    ``series``, each scaled to its own maximum (named beside it)."""
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
    tops = (
        f"max {max(rps):.0f} req/s",
        f"max {_fmt(max((v for v in p99 if v is not None), default=None))} ms",
        f"max {max(share):.0%}",
    )
    return (
        f'<svg width="{width}" height="{height + 14}" class="ft-service-chart">'
        f"{line(rps, '#1565c0')}{line(p99, '#6a1b9a')}{line(share, '#c62828')}"
        f'<text x="0" y="{height + 12}" font-size="10">0 s</text>'
        f'<text x="{width}" y="{height + 12}" font-size="10" text-anchor="end">'
        f"{span:.0f} s (time since the first point)</text></svg>"
        f'<div style="font-size:smaller">now: '
        f'<span style="color:#1565c0">{last_rps:.0f} req/s ({tops[0]})</span>'
        f' &middot; <span style="color:#6a1b9a">p99 {_fmt(last_p99)} ms ({tops[1]})</span>'
        f' &middot; <span style="color:#c62828">fallback {last_share:.0%} ({tops[2]})</span>'
        "; each line scaled to its own maximum</div>"
    )
