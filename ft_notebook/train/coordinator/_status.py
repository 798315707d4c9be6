"""A run's state and health, and the events that tell of them.

:class:`RunStatus` is the one writer of a record's ``view``, what the run is as
everyone sees it: it publishes on the run's topic and folds what it published (and
the checkpoints the ranks report) with the fold every view uses. A state or
health transition publishes one event, and one that changes nothing publishes none.
Every other part of the coordinator is given it and publishes through it.
"""

from __future__ import annotations

import logging
from typing import Any

from ft_notebook.events import (
    CheckpointCommitted,
    Health,
    HealthChanged,
    RunStarted,
    RunState,
    RunStateChanged,
    event_of,
    publish,
    run_topic,
)
from ft_notebook.train.coordinator._link import SchedulerLink
from ft_notebook.train.coordinator._record import Record

logger = logging.getLogger("ft_notebook.train.coordinator._plugin")


class RunStatus:
    """State and health transitions, and events on a run's topic."""

    def __init__(self, link: SchedulerLink) -> None:
        self.link = link

    def started(self, record: Record) -> None:
        """Tell that ``record`` began (PENDING, HEALTHY): views start it afresh, and
        learn which of the user's clusters it runs on."""
        address = str(getattr(self.link.scheduler, "address", "") or "")
        self.publish(
            record,
            RunStarted(
                total_steps=record.options.total_steps,
                cluster=_registered_name(address),
                scheduler=address,
                incarnation=record.incarnation,
            ),
        )

    def set_state(self, record: Record, state: RunState, reason: str) -> None:
        if record.state is state:
            return
        self.publish(record, RunStateChanged(state=state, previous=record.state, reason=reason))

    def update_health(self, record: Record) -> None:
        """Healthy with as many workers training as the run began with, else degraded."""
        plan = record.plan
        world = len(plan.members) if plan is not None else 0
        if world >= record.members.target_world:
            self.set_health(record, Health.HEALTHY, f"{world} workers")
        else:
            self.set_health(
                record, Health.DEGRADED, f"{world} of {record.members.target_world} workers"
            )

    def set_health(self, record: Record, health: Health, reason: str) -> None:
        if record.health is health:
            return
        self.publish(record, HealthChanged(health=health, previous=record.health, reason=reason))

    def publish(self, record: Record, payload: Any) -> None:
        """Publish ``payload`` on the run's topic and fold it into the record's view.
        A failure to publish is logged and the event folded all the same: the run goes
        on, and ``run.info()`` says what the coordinator decided."""
        topic = run_topic(record.name)
        try:
            event = publish(
                payload, topic, run=record.name, via=self.link.scheduler, step=record.step
            )
        except Exception:
            logger.exception("could not publish %s of run %s", payload.kind, record.name)
            event = event_of(payload, topic, run=record.name, step=record.step)
        record.view = record.view.apply(event)

    def checkpointed(self, record: Record, step: int) -> None:
        """A rank's store committed the checkpoint of ``step`` (the rank's report). The
        store journals its own event (``checkpoint-committed``), which the other views
        fold; the record's view folds the same fact from the report, unjournaled: the
        store's event never reaches the scheduler (its writer thread has no Dask
        worker to send it through)."""
        payload = CheckpointCommitted(checkpoint_step=step, nbytes=0)
        record.view = record.view.apply(event_of(payload, run_topic(record.name), step=step))


def _registered_name(address: str) -> str:
    """The name of the user's registered cluster at ``address``, or ``""``."""
    from ft_notebook.cluster import clusters

    try:
        return next((c.name for c in clusters() if c.address == address), "")
    except Exception:  # an unreadable registry costs the view this fact, not the run
        logger.exception("could not read the cluster registry")
        return ""
