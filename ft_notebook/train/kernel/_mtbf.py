"""The mean time between failures a ``checkpoint_every="auto"`` run plans with.

The cluster journal (``ft-notebook.cluster``, one per user: every cluster of yours
writes to it) records every worker lost and every worker hung, with its time, across
restarts of the clusters and of the kernel. When it holds at least
:data:`FEWEST_FAILURES` failures of the last :data:`WINDOW_S`, the run plans with their
rate: the time the journal covers (from its first event in the window to now) over the
failures in it. A run stops for a failure of any of its workers, so this is the
cluster's MTBF, not one worker's. With fewer failures the estimate would be noise
(one failure in a week says little), and ``ft-notebook.train.mtbf`` is used;
``ft-notebook.train.mtbf-from-journal: false`` always uses it.

Failures a drill injected (``%ft chaos kill|hang``, ``ft_notebook.cluster.chaos``)
are not counted: each drill writes a ``drill`` note to the journal before its signal,
and the loss or hang of that worker that follows (until it rejoins) is the drill's.
A rehearsal says nothing of how often the machines fail, and counting drills made a
run planned after three demos' drills take an MTBF of 114 s from them and checkpoint
every 375 ms (issue 38). The plan says where its M came from
(``run.info()["checkpoint_plan"]["mtbf_source"]``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ft_notebook.events import PLAIN_KIND
from ft_notebook.plan import human_duration

#: The fewest recorded failures that the journal's rate is planned with.
FEWEST_FAILURES = 3
#: How far back the journal's failures count.
WINDOW_S = 30 * 24 * 3600.0
#: How long after a drill the loss or hang of its worker is the drill's (a hang is
#: noticed within seconds, and Dask's worker-ttl is 5 minutes).
DRILL_EFFECT_S = 300.0


@dataclass(frozen=True)
class Mtbf:
    """An MTBF in seconds, and where it came from (said in the plan)."""

    seconds: float
    source: str


def recorded_failures(events: Iterable[Any], since: float) -> tuple[int, float | None]:
    """The failures among a cluster journal's ``events`` after ``since`` (a worker
    hung, then lost before it rejoined, is one failure; one a drill caused is none),
    and the time of the first event counted in the window (None for none)."""
    failures, first, down = 0, None, set()
    drilled: dict[str, float] = {}  # worker -> when a drill signalled it
    for e in events:
        if e.time < since:
            continue
        first = e.time if first is None else first
        name = str(e.data.get("name", e.worker))
        if e.kind == PLAIN_KIND and e.data.get("drill"):
            drilled[name] = e.time
        elif e.kind == "worker-joined":
            down.discard(name)
            drilled.pop(name, None)
        elif e.kind in ("worker-lost", "worker-hung") and name not in down:
            drill = drilled.pop(name, None)
            if drill is None or e.time - drill > DRILL_EFFECT_S:
                failures += 1
            down.add(name)
    return failures, first


def journal_mtbf(events: Iterable[Any], now: float | None = None) -> Mtbf | None:
    """The cluster's MTBF from its journal, or None with too few failures in it."""
    now = time.time() if now is None else now
    failures, first = recorded_failures(events, now - WINDOW_S)
    if failures < FEWEST_FAILURES or first is None or now <= first:
        return None
    span = now - first
    return Mtbf(
        span / failures,
        f"the cluster's journal: {failures} failures in {human_duration(span)}",
    )


def planning_mtbf(client: Any, configured_s: float, from_journal: bool) -> Mtbf:
    """The MTBF an "auto" run of ``client``'s cluster plans with (see the module doc)."""
    configured = Mtbf(configured_s, f"ft-notebook.train.mtbf ({human_duration(configured_s)})")
    if not from_journal:
        return configured
    from ft_notebook.events import cluster_topic, history

    try:
        events = history(cluster_topic(), via=client)
    except (OSError, ValueError):  # an unreadable journal plans as without one
        return configured
    return journal_mtbf(events) or configured
