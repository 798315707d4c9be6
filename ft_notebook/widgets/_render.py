"""HTML pieces of a dashboard, shared by the widgets and the static summary.

Every piece carries ``data-*`` attributes (worker, state, health, RTO) so tests and
the JupyterLab extension read values, not styling.
"""

from __future__ import annotations

from ft_notebook.widgets._state import DashboardState, Tile, _bytes, escape

BADGE_COLOURS = {
    "HEALTHY": "#2e7d32",
    "DEGRADED": "#ef6c00",
    "RECOVERING": "#1565c0",
    "STALLED": "#c62828",
    "FALLBACK": "#6a1b9a",
}
TILE_COLOURS = {
    "TRAINING": "#e8f5e9",
    "RUNNING": "#e8f5e9",
    "DONE": "#eceff1",
    "JOINING": "#e3f2fd",
    "HUNG": "#fff3e0",
    "LOST": "#ffebee",
}


def badge_html(s: DashboardState) -> str:
    colour = BADGE_COLOURS.get(s.badge, "#455a64")
    finished = (
        f" &middot; {escape(s.state)}" if s.state in ("COMPLETED", "FAILED", "CANCELLED") else ""
    )
    return (
        f'<span class="ft-badge" data-health="{escape(s.badge)}" data-state="{escape(s.state)}" '
        f'style="background:{colour};color:white;padding:2px 8px;border-radius:4px;'
        f'font-weight:bold">{escape(s.badge)}</span>{finished} '
        f'<span class="ft-reason">{escape(s.reason)}</span>'
    )


def tile_html(t: Tile) -> str:
    details = []
    if t.heartbeat_age_s is not None:
        details.append(f"heartbeat {t.heartbeat_age_s:.1f} s ago")
    if isinstance(t.rss, (int, float)):
        details.append(f"RSS {_bytes(t.rss)}")
    gpu = t.gpu or {}
    if gpu.get("memory_used") is not None:
        details.append(f"GPU {_bytes(gpu['memory_used'])} / {_bytes(gpu.get('memory_total'))}")
    if gpu.get("utilization") is not None:
        details.append(f"util {gpu['utilization']}%")
    if t.restarts:
        details.append(f"restarts {t.restarts}")
    return (
        f'<div class="ft-tile" data-worker="{escape(t.name)}" data-state="{escape(t.state)}" '
        f'style="background:{TILE_COLOURS.get(t.state, "#fafafa")};border:1px solid #ccc;'
        f'border-radius:4px;padding:4px 8px;min-width:110px;font-size:12px">'
        f"<b>{escape(t.name)}</b><br>{escape(t.state)}<br>"
        f'<span style="color:#555">{escape(" · ".join(details))}</span></div>'
    )


def recoveries_html(s: DashboardState) -> str:
    if not s.recoveries:
        return '<div class="ft-recoveries" data-count="0"><i>no recoveries</i></div>'
    rows = "".join(
        f'<tr class="ft-recovery" data-rto="{escape(r["rto_s"])}" '
        f'data-steps-lost="{escape(r["steps_lost"])}">'
        f"<td>{escape(r['step'])}</td><td>{escape(r['cause'])}</td><td>{escape(r['rto_s'])} s</td>"
        f"<td>{escape(r['steps_lost'])}</td><td>{escape(r['workers_before'])} &rarr; "
        f"{escape(r['workers_after'])}</td></tr>"
        for r in s.recoveries
    )
    return (
        f'<table class="ft-recoveries" data-count="{len(s.recoveries)}" style="font-size:12px">'
        "<tr><th>step</th><th>cause</th><th>RTO</th><th>steps lost</th><th>workers</th></tr>"
        f"{rows}</table>"
    )


def checkpoints_html(s: DashboardState) -> str:
    lag = ' <b style="color:#c62828">lagging</b>' if s.lagging else ""
    steps = " &middot; ".join(str(c) for c in s.checkpoints[-12:]) or "none yet"
    lagging = str(s.lagging).lower()
    return f'<div class="ft-checkpoints" data-lagging="{lagging}">checkpoints: {steps}{lag}</div>'


def suspects_html(s: DashboardState) -> str:
    """The robust aggregator's row: whom it did not follow (empty without one)."""
    line = s.suspects_line()
    if not line:
        return ""
    worst = max(s.suspects, key=lambda w: (s.suspects[w], w)) if s.suspects else ""
    return (
        f'<div class="ft-suspects" data-worst="{escape(worst)}" '
        f'data-mean-steps="{s.mean_steps}" style="color:#ad1457">{escape(line)}</div>'
    )


def summary_html(s: DashboardState) -> str:
    title = f"run <b>{escape(s.run)}</b>" if s.run else "cluster"
    parts = [f"<div class='ft-dashboard'>{title}: {badge_html(s)}"]
    if s.run:
        loss = f", loss {s.loss[-1][1]:.4g}" if s.loss else ""
        parts.append(f"<div>{escape(s.progress_line())}{loss}</div>")
    tiles = "".join(tile_html(t) for t in s.tiles.values())
    parts.append(f'<div style="display:flex;gap:4px;flex-wrap:wrap">{tiles}</div>')
    if s.run:
        parts.append(checkpoints_html(s))
        parts.append(suspects_html(s))
        parts.append(recoveries_html(s))
    if s.snapshot:
        parts.append(f"<div>{escape(s.snapshot_line())}</div>")
    parts.append("</div>")
    return "".join(parts)
