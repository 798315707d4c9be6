"""A run's state and health, and the events that tell of them.

:class:`RunStatus` owns the transitions of ``Record.state`` (with its reason) and
``Record.health``, and publishing on the run's topic: each transition publishes one
event, and one that changes nothing publishes none. Every other part of the
coordinator is given it and publishes through it.
"""

from __future__ import annotations

import logging
from typing import Any

from ft_notebook.events import (
    Health,
    HealthChanged,
    RunStarted,
    RunState,
    RunStateChanged,
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
            ),
        )

    def set_state(self, record: Record, state: RunState, reason: str) -> None:
        if record.state is state:
            return
        previous, record.state, record.reason = record.state, state, reason
        self.publish(record, RunStateChanged(state=state, previous=previous, reason=reason))

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
        previous, record.health = record.health, health
        self.publish(record, HealthChanged(health=health, previous=previous, reason=reason))

    def publish(self, record: Record, payload: Any) -> None:
        """Publish ``payload`` on the run's topic; a failure is logged, and the run goes on."""
        try:
            publish(
                payload,
                run_topic(record.name),
                run=record.name,
                via=self.link.scheduler,
                step=record.step,
            )
        except Exception:
            logger.exception("could not publish %s of run %s", payload.kind, record.name)


def _registered_name(address: str) -> str:
    """The name of the user's registered cluster at ``address``, or ``""``."""
    from ft_notebook.cluster import clusters

    try:
        return next((c.name for c in clusters() if c.address == address), "")
    except Exception:  # an unreadable registry costs the view this fact, not the run
        logger.exception("could not read the cluster registry")
        return ""
