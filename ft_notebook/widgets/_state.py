"""What a dashboard shows, folded from events: no widgets here, so it is testable,
and the same state renders as widgets, as HTML and as text.

A dashboard is a pure function of the events it has seen: replaying a run's
journal in a new kernel gives the same state as following it live in the old one.
The run's state, health, progress, checkpoint and recoveries are a
:class:`~ft_notebook.runfold.RunView` (the fold the coordinator and the JupyterLab
panel read too); what only a dashboard shows is folded here: worker tiles, the loss
series, chart markers, the checkpoint steps and the newest snapshot of the notebook
the dashboard lives in (the session topic carries every notebook's snapshots).
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ft_notebook.events import (
    CheckpointCommitted,
    Event,
    RecoveryCompleted,
    RolledBack,
    RunProgress,
    RunStarted,
    SnapshotCommitted,
    StateRepaired,
    StepSkipped,
    WorkerHung,
    WorkerJoined,
    WorkerLost,
)
from ft_notebook.runfold import RUN_KINDS, RunView

#: Tile states, as the tiles show them.
TILE_STATES = ("TRAINING", "JOINING", "RUNNING", "HUNG", "LOST", "DONE")
#: Badge values: the run's health, or its recovery state when it is not training.
BADGES = ("HEALTHY", "DEGRADED", "RECOVERING", "STALLED", "FALLBACK")


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
    #: The key of the notebook whose snapshots this dashboard shows: the one its kernel
    #: snapshots (``ShellSnapshots.key``); None in a kernel without an ft session,
    #: which then shows none.
    notebook: str | None = None
    tiles: dict[str, Tile] = field(default_factory=dict)
    loss: list[tuple[int, float]] = field(default_factory=list)
    markers: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    snapshot: dict[str, Any] | None = None
    version: int = 0  # bumped by every event that changed something
    view: RunView = field(default_factory=RunView)

    # ---- the run, as the shared fold has it (defaults for a run not heard of yet)

    @property
    def state(self) -> str:
        return self.view.state.value if self.view.state is not None else "PENDING"

    @property
    def health(self) -> str:
        return self.view.health.value if self.view.health is not None else "HEALTHY"

    @property
    def reason(self) -> str:
        return self.view.reason

    @property
    def step(self) -> int:
        return self.view.step or 0

    @property
    def total_steps(self) -> int:
        return self.view.total_steps or 0

    @property
    def epoch(self) -> int:
        return self.view.epoch or 0

    @property
    def world_size(self) -> int:
        return self.view.world_size or 0

    @property
    def eta_s(self) -> float | None:
        return self.view.eta_s

    @property
    def samples_per_s(self) -> float | None:
        return self.view.samples_per_s

    @property
    def lagging(self) -> bool:
        return self.view.lagging

    @property
    def suspects(self) -> Mapping[str, int]:
        """A robust aggregator's: worker -> the steps its gradient was suspect in."""
        return self.view.suspects

    @property
    def mean_steps(self) -> int:
        """Steps trained with the mean because the rule's condition failed."""
        return self.view.mean_steps

    def suspects_line(self) -> str:
        """Whom the robust aggregator did not follow, most often first; "" without."""
        if not self.suspects and not self.mean_steps:
            return ""
        ranked = sorted(self.suspects.items(), key=lambda kv: (-kv[1], kv[0]))
        named = ", ".join(f"{w} in {n} of {self.step} steps" for w, n in ranked) or "none"
        mean = f"; {self.mean_steps} steps with the mean (rule not met)" if self.mean_steps else ""
        return f"suspect gradients: {named}{mean}"

    @property
    def recoveries(self) -> list[dict[str, Any]]:
        """As ``Run.info()["recoveries"]`` lists them."""
        return [r.as_dict() for r in self.view.recoveries]

    @property
    def seen(self) -> Mapping[str, int]:
        """Topic -> newest sequence number applied."""
        return self.view.seen

    # ---- folding events

    def apply(self, event: Event) -> bool:
        """Fold one event in; returns whether the state changed. Events already
        seen (by topic and sequence number) are ignored."""
        if self.view.has_seen(event):
            return False
        if event.kind == SnapshotCommitted.kind and not self._is_own_snapshot(event):
            return False  # as if never delivered: replaying a journal skips it again
        self.view = self.view.apply(event)
        handler = _HANDLERS.get(event.kind)
        if handler is not None:
            handler(self, event, event.data)
        elif event.kind not in RUN_KINDS and event.kind not in _MARKER_LABELS:
            return False
        if event.kind in _MARKER_LABELS:
            self._mark(event)
        self.version += 1
        return True

    def _on_run_started(self, e: Event, d: Any) -> None:
        # a run resumed under a name used before is another run: not the old one's
        # tiles, loss curve (whose steps it would hide), marks or checkpoints
        self.tiles, self.loss, self.markers, self.checkpoints = {}, [], [], []

    def _on_progress_reported(self, e: Event, d: Any) -> None:
        step = int(d.get("step", 0))
        loss = d.get("loss")
        if isinstance(loss, (int, float)) and (not self.loss or step > self.loss[-1][0]):
            self.loss.append((step, float(loss)))
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

    def _is_own_snapshot(self, e: Event) -> bool:
        # An event from before snapshots named their notebook ("") could be any
        # notebook's: showing it risks the very mix-up this check exists to prevent.
        notebook = e.data.get("notebook") or ""
        return bool(self.notebook) and notebook == self.notebook

    def _on_snapshot_committed(self, e: Event, d: Any) -> None:
        self.snapshot = {
            "name": d.get("name"),
            "nbytes": d.get("nbytes"),
            "variables": d.get("variables"),
            "lost": list(d.get("lost") or ()),
            "time": e.time,
        }

    def _mark(self, e: Event) -> None:
        label = _MARKER_LABELS[e.kind](e.data)
        step = e.step if e.step is not None else self.step
        self.markers.append({"step": step, "kind": e.kind, "label": label, "time": e.time})

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
        if self.suspects_line():
            lines.append("  " + self.suspects_line())
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


#: Event kind -> what a dashboard alone keeps of it (the run's own facts are the
#: view's; a kind in neither table changes nothing).
_HANDLERS: dict[str, Callable[[DashboardState, Event, Any], None]] = {
    RunStarted.kind: DashboardState._on_run_started,
    RunProgress.kind: DashboardState._on_progress_reported,
    WorkerLost.kind: DashboardState._on_worker_lost,
    WorkerHung.kind: DashboardState._on_worker_hung,
    WorkerJoined.kind: DashboardState._on_worker_joined,
    CheckpointCommitted.kind: DashboardState._on_checkpoint_committed,
    SnapshotCommitted.kind: DashboardState._on_snapshot_committed,
}
#: Event kind -> the label of its marker on the loss chart.
_MARKER_LABELS: dict[str, Callable[[Any], str]] = {
    WorkerLost.kind: lambda d: f"{d.get('name')} lost",
    WorkerHung.kind: lambda d: f"{d.get('name')} hung",
    RecoveryCompleted.kind: lambda d: f"recovered in {d.get('rto_s')} s",
    StepSkipped.kind: lambda d: "non-finite step skipped",
    RolledBack.kind: lambda d: f"rolled back to {d.get('to_step')}",
    StateRepaired.kind: lambda d: f"state of {', '.join(d.get('workers') or ())} repaired",
}


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
