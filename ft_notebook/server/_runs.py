"""Runs as the panel shows them, folded from their journals and kept up to date.

Every poll of the panel asks for all runs. Re-reading whole journals each time would
cost seconds once a run has trained for hours (a progress event a second), so each
journal is folded once and then only its new lines are read, from the byte offset
where the last read ended.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ft_notebook._journal import Journal
from ft_notebook.events import (
    TOPIC_PREFIX,
    CheckpointCommitted,
    Event,
    HealthChanged,
    RecoveryCompleted,
    RunProgress,
    RunStateChanged,
    run_topic,
)
from ft_notebook.exceptions import EventError, UnsafeName
from ft_notebook.server._models import MAX_RECOVERIES, RecoveryModel, RunModel

RUN_PREFIX = f"{TOPIC_PREFIX}.run."


@dataclass
class RunFold:
    """A run's newest state, health, progress, checkpoint and recoveries, folded
    from its events in order."""

    name: str
    topic: str
    fields: dict[str, Any] = field(
        default_factory=lambda: {"state": None, "health": None, "last_seq": 0, "updated": 0.0}
    )
    recoveries: list[RecoveryModel] = field(default_factory=list)

    def add(self, event: Event) -> None:
        self.fields.update(last_seq=event.seq, updated=event.time)
        try:
            payload = event.payload()
        except (TypeError, ValueError):  # written by another version: skip, not fail
            return
        if isinstance(payload, RunStateChanged):
            self.fields["state"] = payload.state
        elif isinstance(payload, HealthChanged):
            self.fields["health"] = payload.health
        elif isinstance(payload, RunProgress):
            self.fields.update(
                step=payload.step,
                total_steps=payload.total_steps,
                world_size=payload.world_size,
                loss=payload.loss,
            )
        elif isinstance(payload, CheckpointCommitted):
            self.fields.update(checkpoint_step=payload.checkpoint_step, checkpoint_time=event.time)
        elif isinstance(payload, RecoveryCompleted):
            self.recoveries.append(
                RecoveryModel(
                    time=event.time,
                    cause=payload.cause,
                    rto_s=payload.rto_s,
                    steps_lost=payload.steps_lost,
                    workers_before=payload.workers_before,
                    workers_after=payload.workers_after,
                )
            )
            del self.recoveries[:-MAX_RECOVERIES]

    def model(self) -> RunModel:
        return RunModel(self.name, self.topic, recoveries=tuple(self.recoveries), **self.fields)


class RunJournals:
    """The runs of one journal folder, each journal read on from where it was left."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # handlers call from several threads
        self._folds: dict[Path, tuple[int, RunFold]] = {}

    def runs(self, folder: Path) -> list[RunModel]:
        with self._lock:
            return [
                m for path in sorted(folder.glob(f"{RUN_PREFIX}*.jsonl")) if (m := self._one(path))
            ]

    def _one(self, path: Path) -> RunModel | None:
        name = path.name[len(RUN_PREFIX) : -len(".jsonl")]
        try:
            topic = run_topic(name)
        except UnsafeName:  # not a journal we wrote; never let it name a path
            return None
        offset, fold = self._folds.get(path, (0, RunFold(name, topic)))
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            self._folds.pop(path, None)
            return None
        if size < offset:  # truncated or replaced: fold it again from the start
            offset, fold = 0, RunFold(name, topic)
        records, offset = Journal(path).read(offset)
        for record in records:
            try:
                fold.add(Event.from_dict(record))
            except EventError:  # a line of something else: the journal reader's rule
                continue
        self._folds[path] = (offset, fold)
        return fold.model()
