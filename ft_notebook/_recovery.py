"""One recovery of a run, as the coordinator tells it and every view folds it.

Kept apart from :mod:`ft_notebook.runfold` (which re-exports it) so that the fold
stays one screenful per view; ``run.info()["recoveries"]`` lists these as dicts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ft_notebook.events import Event, RecoveryCompleted


@dataclass(frozen=True)
class Recovery:
    """One recovery of a run: from a loss (or hang) being noticed to the first step
    the survivors, or a new group, trained after it.

    :meth:`as_dict` is what ``Run.info()["recoveries"]`` lists.
    """

    #: Who was lost and why, e.g. ``"cpu2: worker lost"``; losses during one
    #: recovery are joined with ``"; "``.
    cause: str
    #: Wall-clock times (seconds since the epoch) the loss was noticed and the
    #: group trained again.
    detected_at: float
    resumed_at: float
    #: Seconds from detected_at to resumed_at, rounded to 0.1 ms.
    rto_s: float
    steps_lost: int
    workers_before: int
    workers_after: int
    #: How the new group was made: ``survive`` (the survivors' ready groups) or
    #: ``form`` (a rendezvous); ``""`` in journals written before this was recorded.
    how: str
    #: The generation that trained again (0: not recorded) and its first step.
    generation: int
    step: int
    #: The members checked that they went on from one state a member vouched for.
    verified: bool

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def as_payload(self) -> RecoveryCompleted:
        """The event that tells everyone else of this recovery (it carries it whole)."""
        return RecoveryCompleted(**self.as_dict())

    @classmethod
    def from_event(cls, payload: RecoveryCompleted, event: Event) -> Recovery:
        """The recovery an event tells of; one from an older journal lacks some
        fields, which its envelope gives (time, step) or which read as unknown."""
        resumed_at = payload.resumed_at if payload.resumed_at is not None else event.time
        detected_at = payload.detected_at
        if detected_at is None:
            detected_at = resumed_at - payload.rto_s
        step = payload.step if payload.step is not None else event.step
        generation = payload.generation if payload.generation is not None else event.generation
        return cls(
            cause=payload.cause,
            detected_at=detected_at,
            resumed_at=resumed_at,
            rto_s=payload.rto_s,
            steps_lost=payload.steps_lost,
            workers_before=payload.workers_before,
            workers_after=payload.workers_after,
            how=payload.how,
            generation=generation or 0,
            step=step or 0,
            verified=payload.verified,
        )
