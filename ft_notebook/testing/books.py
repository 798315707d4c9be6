"""Runs' books made the way the coordinator makes them, for table tests of its decisions.

:func:`running` submits a run and takes it through its launch and warm-up with the
pure :func:`~ft_notebook.train.coordinator.decide.decide`, as the scheduler would
(no cluster, no event loop, a clock the caller sets): the book that comes out is one
the coordinator really reaches, not one a test assembled field by field.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ft_notebook.train.coordinator._actions import Action, PublishProgress
from ft_notebook.train.coordinator._book import RunBook
from ft_notebook.train.coordinator._inputs import ActorStarted, Launched, ProgressDue, Reported
from ft_notebook.train.coordinator.decide import decide, start
from ft_notebook.train.protocol import How, Report
from ft_notebook.train.report_kinds import PreparedData, ReadyData, ReportData, SyncedData
from ft_notebook.train.spec import RunOptions

#: The clock of a book made here: the run starts at T0.
T0 = 1000.0
STORE = ("127.0.0.1", 29500)


def workers(n: int) -> tuple[tuple[str, str], ...]:
    return tuple((f"cpu{i}", f"tcp://10.0.0.{i}:4000") for i in range(n))


def report(
    book: RunBook,
    payload: ReportData,
    member: str,
    *,
    step: int | None = None,
    gen: int | None = None,
    now: float | None = None,
    incarnation: str | None = None,
) -> Reported:
    """``payload`` as ``member`` reports it (at the book's step and generation)."""
    plan = book.plan
    at = T0 + 1 if now is None else now
    r = Report(
        book.name,
        member,
        payload.KIND,
        gen if gen is not None else (plan.gen if plan is not None else 0),
        book.step if step is None else step,
        at,
        payload.to_data(),
        book.incarnation if incarnation is None else incarnation,
    )
    return Reported(at, r)


def running(
    n: int = 3, *, name: str = "r", prepared: bool = True, **options: Any
) -> tuple[RunBook, list[Action]]:
    """A run training on ``n`` workers (``cpu0``...), generation 1 formed, every member
    synced (and, ``prepared``, with its survivor groups built), and every action the
    coordinator took to get there."""
    opts = RunOptions(**{"min_workers": 1, "total_steps": 400, **options})
    book, first = start(name, b"spec", opts, T0, incarnation="inc1")
    done: list[Action] = list(first)

    def step(book: RunBook, event: Any) -> RunBook:
        book, actions = decide(book, event)
        done.extend(actions)
        return book

    book = step(book, Launched(T0, STORE, workers(n)))
    for worker, address in workers(n):
        book = step(book, ActorStarted(T0, worker, address))
    for worker, _ in workers(n):
        book = step(book, report(book, ReadyData(), worker, now=T0))
    plan = book.plan
    assert plan is not None, "the first generation did not form"
    for rank, (worker, _) in enumerate(workers(n)):
        synced = SyncedData(world=n, rank=rank, how=How.FORM, verified=True)
        book = step(book, report(book, synced, worker, now=T0))
        if prepared:
            book = step(book, report(book, PreparedData(prepared_gen=plan.gen), worker))
    return book, done


def decided(book: RunBook, event: Any) -> tuple[RunBook, list[Action]]:
    """``decide``, and the progress it asks to publish published at once, as the plugin
    does (with no workers' rows: no cluster here)."""
    book, actions = decide(book, event)
    done = list(actions)
    for action in actions:
        if isinstance(action, PublishProgress):
            book, more = decide(book, ProgressDue(event.now, {}, force=action.force))
            done.extend(more)
    return book, done


def at(book: RunBook, **changes: Any) -> RunBook:
    """``book`` with ``changes`` (a state the coordinator reached, moved on in time)."""
    return replace(book, **changes)
