"""What a dashboard shows, folded from events: no widgets here, so it is testable,
and the same state renders as widgets, as HTML and as text.

A dashboard is a pure function of the events it has seen: replaying a run's
journal in a new kernel gives the same state as following it live in the old one.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Any

from ft_notebook.events import Event

#: Tile states, as the tiles show them.
TILE_STATES = ("TRAINING", "JOINING", "RUNNING", "HUNG", "LOST", "DONE")
#: Badge values: the run's health, or its recovery state when it is not training.
BADGES = ("HEALTHY", "DEGRADED", "RECOVERING", "STALLED", "FALLBACK")
_MARKER_KINDS = {
    "worker-lost",
    "worker-hung",
    "recovery-completed",
    "step-skipped",
    "rolled-back",
    "state-repaired",
}


@dataclass
class Tile:
    name: str
    state: str = "RUNNING"
    heartbeat_age_s: float | None = None
    rss: int | None = None
    gpu: dict[str, Any] | None = None
    restarts: int = 0


@dataclass
class DashboardState:
    """Everything a dashboard shows. ``apply`` each event once, in order."""

    run: str | None = None
    state: str = "PENDING"
    health: str = "HEALTHY"
    reason: str = ""
    step: int = 0
    total_steps: int = 0
    epoch: int = 0
    world_size: int = 0
    eta_s: float | None = None
    samples_per_s: float | None = None
    tiles: dict[str, Tile] = field(default_factory=dict)
    loss: list[tuple[int, float]] = field(default_factory=list)
    markers: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    lagging: bool = False
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    snapshot: dict[str, Any] | None = None
    version: int = 0  # bumped by every event that changed something
    seen: dict[str, int] = field(default_factory=dict)  # topic -> newest seq applied

    # ---- folding events

    def apply(self, event: Event) -> bool:
        """Fold one event in; returns whether the state changed. Events already
        seen (by topic and sequence number) are ignored."""
        if event.seq and event.seq <= self.seen.get(event.topic, 0):
            return False
        self.seen[event.topic] = event.seq
        handler = getattr(self, "_on_" + event.kind.replace("-", "_"), None)
        if handler is None:
            return False
        handler(event, event.data)
        if event.kind in _MARKER_KINDS:
            self._mark(event)
        self.version += 1
        return True

    def _on_run_state_changed(self, e: Event, d: Any) -> None:
        self.state, self.reason = str(d.get("state")), str(d.get("reason", ""))

    def _on_health_changed(self, e: Event, d: Any) -> None:
        self.health = str(d.get("health"))
        if self.state not in ("RECOVERING", "STALLED"):
            self.reason = str(d.get("reason", ""))

    def _on_progress_reported(self, e: Event, d: Any) -> None:
        step = int(d.get("step", 0))
        loss = d.get("loss")
        if isinstance(loss, (int, float)) and (not self.loss or step > self.loss[-1][0]):
            self.loss.append((step, float(loss)))
        self.step, self.total_steps = step, int(d.get("total_steps") or 0)
        self.epoch, self.world_size = int(d.get("epoch", 0)), int(d.get("world_size", 0))
        self.eta_s, self.samples_per_s = d.get("eta_s"), d.get("samples_per_s")
        if d.get("state"):
            self.state = str(d["state"])
        for w in d.get("workers") or ():
            tile = self.tiles.setdefault(str(w["name"]), Tile(str(w["name"])))
            state = str(w.get("state", "running")).upper()
            if state in ("LOST", "HUNG") and tile.state != state:
                label = f"{tile.name} {state.lower()}"
                self.markers.append(
                    {
                        "step": step,
                        "kind": f"worker-{state.lower()}",
                        "label": label,
                        "time": e.time,
                    }
                )
            tile.state = state
            tile.heartbeat_age_s = w.get("heartbeat_age_s")
            tile.rss, tile.gpu = w.get("rss"), w.get("gpu")
            tile.restarts = int(w.get("restarts") or 0)

    def _on_recovery_completed(self, e: Event, d: Any) -> None:
        self.recoveries.append(
            {
                "step": e.step,
                "time": e.time,
                "cause": d.get("cause", ""),
                "rto_s": d.get("rto_s"),
                "steps_lost": d.get("steps_lost"),
                "workers_before": d.get("workers_before"),
                "workers_after": d.get("workers_after"),
            }
        )

    def _on_worker_lost(self, e: Event, d: Any) -> None:
        self._tile_state(str(d.get("name", e.worker)), "LOST")

    def _on_worker_hung(self, e: Event, d: Any) -> None:
        self._tile_state(str(d.get("name", e.worker)), "HUNG")

    def _on_worker_joined(self, e: Event, d: Any) -> None:
        self._tile_state(str(d.get("name", e.worker)), "JOINING" if self.run else "RUNNING")

    def _tile_state(self, name: str, state: str) -> None:
        if self.run is None or name in self.tiles:  # a run shows only its own workers
            self.tiles.setdefault(name, Tile(name)).state = state

    def _on_checkpoint_committed(self, e: Event, d: Any) -> None:
        step = int(d.get("checkpoint_step", e.step or 0))
        if step not in self.checkpoints:
            self.checkpoints.append(step)
        self.lagging = False

    def _on_checkpoint_failed(self, e: Event, d: Any) -> None:
        self.lagging = True

    def _on_step_skipped(self, e: Event, d: Any) -> None:
        pass  # a marker only

    def _on_rolled_back(self, e: Event, d: Any) -> None:
        pass  # a marker only

    def _on_state_repaired(self, e: Event, d: Any) -> None:
        pass  # a marker only

    def _on_snapshot_committed(self, e: Event, d: Any) -> None:
        self.snapshot = {
            "name": d.get("name"),
            "nbytes": d.get("nbytes"),
            "variables": d.get("variables"),
            "lost": list(d.get("lost") or ()),
            "time": e.time,
        }

    def _mark(self, e: Event) -> None:
        d = e.data
        labels = {
            "worker-lost": f"{d.get('name')} lost",
            "worker-hung": f"{d.get('name')} hung",
            "recovery-completed": f"recovered in {d.get('rto_s')} s",
            "step-skipped": "non-finite step skipped",
            "rolled-back": f"rolled back to {d.get('to_step')}",
            "state-repaired": f"state of {', '.join(d.get('workers') or ())} repaired",
        }
        step = e.step if e.step is not None else self.step
        self.markers.append({"step": step, "kind": e.kind, "label": labels[e.kind], "time": e.time})

    # ---- what to show

    @property
    def badge(self) -> str:
        if self.state in ("RECOVERING", "STALLED"):
            return self.state
        if self.health in BADGES:
            return self.health
        return "DEGRADED" if self.health == "LOST" else "HEALTHY"

    def progress_line(self) -> str:
        total = self.total_steps or "?"
        eta = f", ETA {_duration(self.eta_s)}" if self.eta_s else ""
        rate = f", {self.samples_per_s:,.0f} samples/s" if self.samples_per_s else ""
        return f"epoch {self.epoch}, step {self.step}/{total}{rate}{eta}"

    def snapshot_line(self) -> str:
        s = self.snapshot
        if s is None:
            return ""
        lost = f", lost: {', '.join(s['lost'])}" if s["lost"] else ", nothing lost"
        age = _duration(time.time() - s["time"]) if s.get("time") else "?"
        size = _bytes(s["nbytes"])
        return f"last snapshot {s['name']!r} {age} ago, {size}, {s['variables']} variables{lost}"

    def text(self) -> str:
        """The whole dashboard as plain text (non-widget front ends, logs)."""
        title = f"run {self.run!r}" if self.run else "cluster"
        lines = [f"{title}: {self.badge} ({self.state}) {self.reason}".rstrip()]
        if self.run:
            lines.append("  " + self.progress_line())
            if self.loss:
                lines.append(f"  loss {self.loss[-1][1]:.4g} at step {self.loss[-1][0]}")
        if self.tiles:
            lines.append(
                "  workers: " + ", ".join(f"{t.name} {t.state}" for t in self.tiles.values())
            )
        if self.checkpoints:
            lag = " (lagging)" if self.lagging else ""
            lines.append(
                f"  checkpoints at steps {', '.join(map(str, self.checkpoints[-8:]))}{lag}"
            )
        for r in self.recoveries:
            lines.append(
                f"  recovery at step {r['step']}: {r['cause']}; RTO {r['rto_s']} s, "
                f"{r['steps_lost']} steps lost, "
                f"workers {r['workers_before']} -> {r['workers_after']}"
            )
        if self.snapshot:
            lines.append("  " + self.snapshot_line())
        return "\n".join(lines)

    def html(self) -> str:
        """A compact HTML summary (nbconvert, notebooks without widgets)."""
        from ft_notebook.widgets._render import summary_html

        return summary_html(self)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def escape(value: Any) -> str:
    return html.escape(str(value), quote=True)
