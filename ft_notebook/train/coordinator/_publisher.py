"""A run's progress for dashboards: about once a second, at once when asked.

:class:`ProgressPublisher` owns ``record.progress.published`` (when, and what, it last
published) and builds each :class:`~ft_notebook.events.RunProgress` from the record
and the control plane's rows of the workers (heartbeats, memory, GPU health). What
stands still is published again only every 10 s.
"""

from __future__ import annotations

import time
from typing import Any

from ft_notebook.cluster.plugins import name_key
from ft_notebook.events import RunProgress
from ft_notebook.train.coordinator._link import SchedulerLink
from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.coordinator._status import RunStatus


class ProgressPublisher:
    """Publishes :class:`~ft_notebook.events.RunProgress` of a run, throttled."""

    def __init__(self, link: SchedulerLink, status: RunStatus) -> None:
        self.link = link
        self.status = status

    def publish(self, record: Record, *, force: bool = False) -> None:
        workers = self.workers_of(record)
        what = (record.step, record.state, workers_key(workers))
        when, last = record.progress.published
        now = time.time()
        if not force and (now - when < 1.0 or (what == last and now - when < 10.0)):
            return
        record.progress.published = (now, what)
        total = record.options.total_steps
        eta = (
            (total - record.step) / record.progress.steps_per_s
            if total and record.progress.steps_per_s
            else None
        )
        loss = record.loss if isinstance(record.loss, (int, float)) else None
        self.status.publish(
            record,
            RunProgress(
                step=record.step,
                total_steps=total,
                epoch=record.epoch,
                world_size=record.gens.world,
                loss=loss,
                samples_per_s=next(
                    (
                        h["samples_per_s"]
                        for h in reversed(record.progress.history)
                        if h["samples_per_s"]
                    ),
                    None,
                ),
                eta_s=round(eta, 1) if eta is not None and not record.finished else None,
                state=record.state.value,
                workers=workers,
                suspects=dict(record.progress.suspects),
                mean_steps=record.progress.mean_steps,
                lagging=record.noted.lagging,
            ),
        )

    def workers_of(self, record: Record) -> tuple[dict[str, Any], ...]:
        """One row per worker that had a rank of the run or is in its generation."""
        rows = {r["name"]: r for r in self.link.control.rows()}
        plan = record.plan
        members = set(plan.members) if plan is not None and not plan.stop else set()
        out = []
        for name in sorted(record.members.seen | members, key=name_key):
            row = rows.get(name, {})
            if row.get("state") in ("lost", "hung") or name not in record.members.actors:
                state = str(row.get("state") or "lost")
                state = "lost" if state == "running" else state  # a new process, no rank yet
            elif record.finished:
                state = "done"
            elif name in members:
                state = "training"
            else:
                state = "joining"
            out.append(
                {
                    "name": name,
                    "state": state,
                    "heartbeat_age_s": row.get("heartbeat_age_s"),
                    "rss": row.get("rss"),
                    "gpu": row.get("gpu_health"),
                    "restarts": row.get("restarts", 0),
                }
            )
        return tuple(out)


def workers_key(workers: tuple[dict[str, Any], ...]) -> tuple[tuple[str, str], ...]:
    """What of the workers makes a new progress event worth publishing."""
    return tuple((str(w["name"]), str(w["state"])) for w in workers)
