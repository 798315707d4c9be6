"""Runs as the panel shows them, folded from their journals and kept up to date.

The fold is :class:`~ft_notebook.runfold.RunView`'s, the one dashboards read too;
this module only reads journals into it and shows it as the API's models.

Every poll of the panel asks for all runs. Re-reading whole journals each time would
cost seconds once a run has trained for hours (a progress event a second), so each
journal is folded once and then only its new lines are read, from the byte offset
where the last read ended.
"""

from __future__ import annotations

import math
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ft_notebook._journal import Journal
from ft_notebook.events import TOPIC_PREFIX, Event, run_topic
from ft_notebook.exceptions import EventError, UnsafeName
from ft_notebook.runfold import RunView
from ft_notebook.server._models import (
    MAX_RECOVERIES,
    RecoveryModel,
    RunHistoryModel,
    RunModel,
    RunPointModel,
)

RUN_PREFIX = f"{TOPIC_PREFIX}.run."


@dataclass
class RunFold:
    """A run's journal folded into a :class:`~ft_notebook.runfold.RunView` (the
    fold dashboards and the coordinator read too), shown as a :class:`RunModel`."""

    name: str
    topic: str
    view: RunView = field(default_factory=RunView)

    def add(self, event: Event) -> None:
        self.view = self.view.apply(event)

    def model(self, running: Mapping[str, str]) -> RunModel:
        """The run as the panel shows it; ``running`` maps the names of the user's
        running clusters to their scheduler addresses."""
        v = self.view
        unfinished = v.state is not None and not v.state.finished
        # a cluster of the same name started since is another cluster: its address differs
        unregistered = bool(v.cluster) and running.get(v.cluster) != v.scheduler
        gone = unfinished and (unregistered or _process_gone(v.host, v.pid, v.pid_started))
        return RunModel(
            self.name,
            self.topic,
            state=v.state,
            health=v.health,
            last_seq=v.last_seq,
            updated=v.updated,
            step=v.step,
            total_steps=v.total_steps,
            world_size=v.world_size,
            loss=v.loss,
            checkpoint_step=v.checkpoint_step,
            checkpoint_time=v.checkpoint_time,
            recoveries=tuple(RecoveryModel.of(r) for r in v.recoveries[-MAX_RECOVERIES:]),
            cluster=v.cluster,
            cluster_gone=gone,
        )

    def history(self, running: Mapping[str, str]) -> RunHistoryModel:
        """The run with why it is in its state and its progress over time: the same
        fold as :meth:`model`, so the plot and the panel's row agree."""
        points = tuple(
            RunPointModel(p.time, p.step, _finite(p.loss), _finite(p.samples_per_s))
            for p in self.view.history
        )
        return RunHistoryModel(self.model(running), self.view.reason, points)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _process_gone(host: str, pid: int, started: float) -> bool:
    """Whether the scheduler process a run told of is gone: only knowable on its own
    host (a pid elsewhere says nothing here); a pid reused by another process has
    another start time."""
    if not pid or host != socket.gethostname():
        return False
    try:
        process = psutil.Process(pid)
        return process.status() == psutil.STATUS_ZOMBIE or abs(process.create_time() - started) > 1
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # another user's process, say: it exists
        return False


class RunJournals:
    """The runs of one journal folder, each journal read on from where it was left."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # handlers call from several threads
        self._folds: dict[Path, tuple[int, RunFold]] = {}

    def runs(self, folder: Path, running: Mapping[str, str]) -> list[RunModel]:
        """The runs journaled in ``folder``; ``running``: cluster name -> address of
        the user's running clusters, to tell which runs lost theirs."""
        with self._lock:
            paths = sorted(folder.glob(f"{RUN_PREFIX}*.jsonl"))
            folds = [fold for path in paths if (fold := self._one(path))]
        return [f.model(running) for f in folds]

    def history(
        self, folder: Path, name: str, running: Mapping[str, str]
    ) -> RunHistoryModel | None:
        """Run ``name``'s history, or None when it has no journal in ``folder``.

        Raises:
            UnsafeName: ``name`` could not be a run's (it never becomes a path then).
        """
        run_topic(name)  # refuses a name that is not a run's before it names a file
        with self._lock:
            fold = self._one(folder / f"{RUN_PREFIX}{name}.jsonl")
        return None if fold is None else fold.history(running)

    def _one(self, path: Path) -> RunFold | None:
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
        return fold
