"""A run's state and health, and the events that tell of them: the one writer of
``RunBook.view``.

Every event the coordinator decides to publish goes through :func:`publish`: it is
folded into the book's view at once, by the fold every view uses, and handed to the
plugin to publish (a :class:`~._actions.Publish`). A state or health transition
publishes one event, and one that changes nothing publishes none. The view also
folds the checkpoints the ranks report (:func:`checkpointed`).

And the one writer of ``RunBook.step`` (:func:`stepped`) and of ``last_advance``
(:func:`alive`), which the stall watch reads.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ft_notebook.events import (
    CheckpointCommitted,
    Health,
    HealthChanged,
    RunStarted,
    RunState,
    RunStateChanged,
    event_of,
    run_topic,
)
from ft_notebook.train.coordinator._actions import Decision, Publish
from ft_notebook.train.coordinator._book import RunBook


def publish(book: RunBook, payload: Any, d: Decision) -> RunBook:
    """The book with ``payload`` folded into its view; the plugin publishes it."""
    event = event_of(payload, run_topic(book.name), run=book.name, step=book.step, at=d.now)
    d.do(Publish(payload, book.step))
    return replace(book, view=book.view.apply(event))


def started(
    book: RunBook, cluster: str, scheduler: str, process: tuple[str, int, float], d: Decision
) -> RunBook:
    """Tell that the run began (PENDING, HEALTHY): views start it afresh, and learn
    which of the user's clusters it runs on, and in which process (host, pid, start)."""
    host, pid, pid_started = process
    payload = RunStarted(
        total_steps=book.options.total_steps,
        cluster=cluster,
        scheduler=scheduler,
        host=host,
        pid=pid,
        pid_started=pid_started,
        incarnation=book.incarnation,
    )
    return publish(book, payload, d)


def set_state(book: RunBook, state: RunState, reason: str, d: Decision) -> RunBook:
    if book.state is state:
        return book
    return publish(book, RunStateChanged(state=state, previous=book.state, reason=reason), d)


def set_health(book: RunBook, health: Health, reason: str, d: Decision) -> RunBook:
    if book.health is health:
        return book
    return publish(book, HealthChanged(health=health, previous=book.health, reason=reason), d)


def update_health(book: RunBook, d: Decision) -> RunBook:
    """Healthy with as many workers training as the run began with and its checkpoints
    written, else degraded (a run that cannot checkpoint would lose all its work to
    the next fault)."""
    world = len(book.plan.members) if book.plan is not None else 0
    target = book.members.target_world
    if world < target:
        return set_health(book, Health.DEGRADED, f"{world} of {target} workers", d)
    if book.noted.failing:
        return set_health(book, Health.DEGRADED, f"checkpoints fail: {book.noted.failing}", d)
    return set_health(book, Health.HEALTHY, f"{world} workers", d)


def checkpointed(book: RunBook, step: int, d: Decision) -> RunBook:
    """A rank's store committed the checkpoint of ``step`` (the rank's report). The
    store journals its own event (``checkpoint-committed``), which the other views
    fold; the book's view folds the same fact from the report, unpublished: the
    store's event never reaches the scheduler (its writer thread has no Dask worker
    to send it through)."""
    payload = CheckpointCommitted(checkpoint_step=step, nbytes=0)
    event = event_of(payload, run_topic(book.name), step=step, at=d.now)
    return replace(book, view=book.view.apply(event))


def stepped(book: RunBook, step: int, d: Decision, *, at_least: bool = False) -> RunBook:
    """Training is at ``step``: where rank 0 says it is (progress, a roll-back, the
    end), or, ``at_least``, a step the ranks proved they reached (a generation
    synced or resumed there, a checkpoint committed there), which never takes the
    step back. A step moving on is training alive (:func:`alive`)."""
    new = max(book.step, step) if at_least else step
    if new == book.step:
        return book
    moved = replace(book, step=new)
    return alive(moved, d) if new > book.step else moved


def alive(book: RunBook, d: Decision) -> RunBook:
    """Training was seen going on now: its step moved on, a generation began to
    train, or a stuck member was taken out. The stall watch measures from here."""
    return replace(book, last_advance=d.now)
