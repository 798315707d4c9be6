"""A run's progress for dashboards: about once a second, at once when asked.

:func:`on_progress_due` is the one writer of ``progress.published`` (when, and what,
was last published) and builds each :class:`~ft_notebook.events.RunProgress` from the
book and the control plane's rows of the workers (heartbeats, memory, GPU health).
What stands still is published again only every 10 s. Speed and ETA are computed
here, once: every view reads them from this event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ft_notebook.cluster.plugins import name_key
from ft_notebook.events import RunProgress
from ft_notebook.train.coordinator import _status
from ft_notebook.train.coordinator._actions import Decision
from ft_notebook.train.coordinator._book import RunBook
from ft_notebook.train.coordinator._inputs import ProgressDue


def on_progress_due(book: RunBook, due: ProgressDue, d: Decision) -> RunBook:
    workers = workers_of(book, due.rows)
    what = (book.step, book.state, workers_key(workers))
    when, last = book.progress.published
    if not due.force and (d.now - when < 1.0 or (what == last and d.now - when < 10.0)):
        return book
    book = replace(book, progress=replace(book.progress, published=(d.now, what)))
    total, rate = book.options.total_steps, book.progress.steps_per_s
    eta = (total - book.step) / rate if total and rate else None
    samples = (p["samples_per_s"] for p in reversed(book.progress.history) if p["samples_per_s"])
    payload = RunProgress(
        step=book.step,
        total_steps=total,
        epoch=book.epoch,
        world_size=book.gens.world,
        loss=book.loss if isinstance(book.loss, (int, float)) else None,
        samples_per_s=next(samples, None),
        eta_s=round(eta, 1) if eta is not None and not book.finished else None,
        state=book.state.value,
        workers=workers,
        suspects=dict(book.progress.suspects),
        mean_steps=book.progress.mean_steps,
        lagging=book.noted.lagging,
    )
    return _status.publish(book, payload, d)


def workers_of(book: RunBook, rows: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """One row per worker that had a rank of the run or is in its generation."""
    members = set(book.training)
    out = []
    for name in sorted(book.members.seen | members, key=name_key):
        row = rows.get(name, {})
        if row.get("state") in ("lost", "hung") or name not in book.members.actors:
            state = str(row.get("state") or "lost")
            state = "lost" if state == "running" else state  # a new process, no rank yet
        elif book.finished:
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
