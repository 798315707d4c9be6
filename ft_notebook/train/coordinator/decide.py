"""The coordinator's decisions: ``decide(book, input) -> (book, actions)``, pure.

A run's state is a :class:`~._book.RunBook`, immutable. Everything that happens to a
run reaches it as an input (:mod:`._inputs`: a rank's report, the control plane's
news of a worker, a timer, the answer to an earlier action, a kernel's cancel, the
cluster closing), and :func:`decide` returns the run's next book and what to do
(:mod:`._actions`: events to publish, plans to send, actors to start, members to
evict, timers to set). It reads no clock (each input carries ``now``), does no I/O
and changes nothing it was given, so its tests are tables: a book and an input in,
a book and actions out, with no event loop and no sleeps
(``tests/unit/train/test_decide.py``). The scheduler plugin (:mod:`._plugin`) feeds
it inputs and carries out its actions (:mod:`._carry_out`).

Which rule decides on which input, and which part of the book each rule keeps:

- :mod:`._membership`: the launch, warm-up and first generation, actors started,
  workers lost, hung and joined, joiners admitted (``members``);
- :mod:`._generations`: plans, a plan that found no actor, what a loss does
  (``plan``, ``gens``, opening ``recovery.pending``);
- :mod:`._reports`: rank reports, by kind, to the rules below (``highest_step``);
- :mod:`._recoveries` and :mod:`._evictions`: recoveries completed, collectives
  failed with no loss, members evicted (``recovery``, ``members.evicted``);
- :mod:`._progress_reports`, :mod:`._notes`: history, rates, notes, checkpoints;
- :mod:`._stall`: the watchdog's ticks, ranks asked where they are (``asked``);
- :mod:`._publisher`: progress for dashboards (``progress.published``);
- :mod:`._end`: the end of a run (``finished_at``, ``errors``, ``spec``);
- :mod:`._status`: the one writer of ``view`` (by publishing), ``step`` and
  ``last_advance``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ft_notebook.events import RunState
from ft_notebook.train.coordinator import (
    _end,
    _generations,
    _membership,
    _publisher,
    _recoveries,
    _reports,
    _stall,
    _status,
)
from ft_notebook.train.coordinator._actions import Action, Decision, Hold, Launch, PublishProgress
from ft_notebook.train.coordinator._book import RunBook
from ft_notebook.train.coordinator._inputs import (
    ActorStarted,
    Cancelled,
    ClusterClosing,
    Input,
    Launched,
    LaunchFailed,
    PlanAnswered,
    ProgressDue,
    RankStates,
    ReformDue,
    Reported,
    Tick,
    WarmupOver,
    WorkerNews,
)
from ft_notebook.train.spec import RunOptions


def start(
    name: str,
    spec: bytes,
    options: RunOptions,
    now: float,
    *,
    cluster: str = "",
    scheduler: str = "",
    process: tuple[str, int, float] = ("", 0, 0.0),
    incarnation: str | None = None,
) -> tuple[RunBook, tuple[Action, ...]]:
    """A new run (PENDING, HEALTHY): told to every view, holding its cluster, launching."""
    d = Decision(now)
    book = RunBook(
        name=name,
        incarnation=incarnation or uuid.uuid4().hex[:12],
        spec=spec,
        options=options,
        started_at=now,
        last_advance=now,
    )
    book = _status.started(book, cluster, scheduler, process, d)
    d.do(Hold())
    d.do(Launch())
    return book, tuple(d.actions)


def decide(book: RunBook, event: Input) -> tuple[RunBook, tuple[Action, ...]]:
    """The run's next book, and what to do, after ``event``."""
    d = Decision(event.now)
    rule = _RULES[type(event)]
    return _membership.admit_if_parked(rule(book, event, d), d), tuple(d.actions)


def _on_reported(book: RunBook, event: Reported, d: Decision) -> RunBook:
    return _reports.on_report(book, event.report, d)


def _on_tick(book: RunBook, event: Tick, d: Decision) -> RunBook:
    if not book.finished:
        d.do(PublishProgress(force=False))
    return _stall.on_tick(book, d)


def _on_cancelled(book: RunBook, event: Cancelled, d: Decision) -> RunBook:
    return _end.finish(book, RunState.CANCELLED, "cancelled by the user", d)


def _on_cluster_closing(book: RunBook, event: ClusterClosing, d: Decision) -> RunBook:
    # A run ends with its cluster: said here, or its journal would say RUNNING for ever
    # (the panel, the status bar and a re-attaching kernel read it).
    return _end.finish(book, RunState.CANCELLED, "its cluster shut down", d)


_RULES: dict[type[Any], Callable[[RunBook, Any, Decision], RunBook]] = {
    Launched: _membership.on_launched,
    LaunchFailed: _membership.on_launch_failed,
    ActorStarted: _membership.on_actor_started,
    WarmupOver: lambda book, event, d: _membership.on_warmup_over(book, d),
    WorkerNews: _membership.on_news,
    Reported: _on_reported,
    PlanAnswered: _generations.on_plan_answered,
    ReformDue: _recoveries.on_reform_due,
    Tick: _on_tick,
    RankStates: _stall.on_rank_states,
    ProgressDue: _publisher.on_progress_due,
    Cancelled: _on_cancelled,
    ClusterClosing: _on_cluster_closing,
}


def replaced_now(event: Input, now: float) -> Input:
    """``event`` as it arrives at ``now`` (a timer's input is made before it fires)."""
    return replace(event, now=now)
