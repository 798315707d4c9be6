"""A run's history: its loss curve and evaluations, bounded in size.

The functions here keep ``record.progress``: the ``history`` (and ``history_every``,
how often a progress point is kept), the step rate (``steps_per_s``, ``step_times``,
which the stall threshold reads) and a robust aggregator's suspects. They keep no
state of their own: the run's record holds it all, so they are the handlers of
``progress`` and ``eval`` reports as they are.
"""

from __future__ import annotations

import bisect
import time
from typing import Any

from ft_notebook.train.coordinator._record import Record
from ft_notebook.train.protocol import Report
from ft_notebook.train.report_kinds import DoneData, EvalData, ProgressData

#: Points a run's history keeps (see :func:`trim_history`).
HISTORY_MAX = 2000


def on_progress(record: Record, r: Report) -> None:
    """Rank 0's progress (throttled): the step, its rate, and a point of the curve."""
    d = ProgressData.of(r)
    now = time.time()
    if r.step > record.step:
        record.last_advance = now
        rate = d.steps_per_s or 0.0
        record.progress.steps_per_s = rate
        if rate:
            record.progress.step_times = ([*record.progress.step_times, 1.0 / rate])[-50:]
    record.step, record.epoch, record.loss = r.step, d.epoch, d.loss
    point: dict[str, Any] = {
        "step": r.step,
        "time": r.time,
        "loss": d.loss,
        "steps_per_s": d.steps_per_s,
        "samples_per_s": d.samples_per_s,
        "world_size": d.world,
    }
    point.update(add_robust_window(record, d))
    if d.lagging is not None:  # rank 0's view: failing saves, or saves queued behind a slow one
        record.noted.lagging = d.lagging
    if r.step % record.progress.history_every == 0:
        record.progress.history.append(point)
    trim_history(record)


def add_robust_window(record: Record, d: ProgressData | DoneData) -> dict[str, Any]:
    """Add a robust aggregator's window (what rank 0 tells with each progress report,
    and with ``done`` for the steps after the last one) to the run's totals; returns
    the window, for the history point."""
    window: dict[str, Any] = {}
    if d.suspects:  # worker -> suspect steps in the window
        window["suspects"] = dict(d.suspects)
        totals = record.progress.suspects
        for name, steps in d.suspects.items():
            totals[name] = totals.get(name, 0) + steps
    if d.mean_steps:  # on_violation="mean": steps the rule could not hold for
        window["mean_steps"] = d.mean_steps
        record.progress.mean_steps += d.mean_steps
    return window


def on_eval(record: Record, r: Report) -> None:
    """An evaluation (run in the background on rank 0) finished: its result goes
    into the history at the step whose weights it evaluated."""
    d = EvalData.of(r)
    step = d.eval_step
    result: dict[str, Any] = {"eval_time": r.time}  # when it finished
    if d.eval is not None:
        result["eval"] = d.eval
    if d.eval_error is not None:
        result["eval_error"] = d.eval_error
    for point in reversed(record.progress.history):
        if point["step"] == step:
            point.update(result)
            return
        if point["step"] < step:
            break
    point = {"step": step, "time": r.time, "loss": None, "steps_per_s": None}
    point.update(samples_per_s=None, world_size=None, **result)
    bisect.insort(record.progress.history, point, key=lambda p: p["step"])
    trim_history(record)


def trim_history(record: Record) -> None:
    """Keep a run's history within :data:`HISTORY_MAX` points: every other progress
    point goes (and later ones are kept half as often); evaluations, sparse and
    wanted, stay unless they alone fill half of it, then every other one goes too."""
    if len(record.progress.history) <= HISTORY_MAX:
        return
    evals = [p for p in record.progress.history if "eval_time" in p]
    progress = [p for p in record.progress.history if "eval_time" not in p][::2]
    record.progress.history_every *= 2
    if len(evals) > HISTORY_MAX // 2:
        evals = evals[::-2][::-1]  # the newest stays
    record.progress.history = sorted(progress + evals, key=lambda p: p["step"])
