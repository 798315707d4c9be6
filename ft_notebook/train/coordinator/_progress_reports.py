"""A run's history: its loss curve and evaluations, bounded in size.

The functions here are the one writer of ``RunBook.progress`` but ``published``: the
``history`` (and ``history_every``, how often a progress point is kept), the step
rate (``steps_per_s``, ``step_times``, which the stall threshold reads) and a robust
aggregator's suspects; and of ``epoch`` and ``loss`` while the run trains.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Any

from ft_notebook.train.coordinator import _notes, _status
from ft_notebook.train.coordinator._actions import Decision
from ft_notebook.train.coordinator._book import Progress, RunBook
from ft_notebook.train.protocol import Report
from ft_notebook.train.report_kinds import DoneData, EvalData, ProgressData

#: Points a run's history keeps (see :func:`trim_history`).
HISTORY_MAX = 2000


def on_progress(book: RunBook, r: Report, d: Decision) -> RunBook:
    """Rank 0's progress (throttled): the step, its rate, and a point of the curve."""
    p = ProgressData.of(r)
    progress = book.progress
    if r.step > book.step:
        rate = p.steps_per_s or 0.0
        times = (*progress.step_times, 1.0 / rate)[-50:] if rate else progress.step_times
        progress = replace(progress, steps_per_s=rate, step_times=times)
    book = _status.stepped(told(replace(book, progress=progress), p.epoch, p.loss), r.step, d)
    point: dict[str, Any] = {
        "step": r.step,
        "time": r.time,
        "loss": p.loss,
        "steps_per_s": p.steps_per_s,
        "samples_per_s": p.samples_per_s,
        "world_size": p.world,
    }
    book, window = add_robust_window(book, p)
    point.update(window)
    if p.lagging is not None:  # rank 0's view: failing saves, or saves queued behind a slow one
        book = _notes.lagging(book, p.lagging)
    if r.step % book.progress.history_every == 0:
        history = (*book.progress.history, point)
        book = replace(book, progress=trim_history(replace(book.progress, history=history)))
    return book


def told(book: RunBook, epoch: int, loss: float | str | None) -> RunBook:
    """Rank 0's epoch and loss, as it told them."""
    return replace(book, epoch=epoch, loss=loss)


def add_robust_window(book: RunBook, p: ProgressData | DoneData) -> tuple[RunBook, dict[str, Any]]:
    """The book with a robust aggregator's window (what rank 0 tells with each progress
    report, and with ``done`` for the steps after the last one) added to the run's
    totals, and the window, for the history point."""
    window: dict[str, Any] = {}
    progress = book.progress
    if p.suspects:  # worker -> suspect steps in the window
        window["suspects"] = dict(p.suspects)
        totals = dict(progress.suspects)
        for name, steps in p.suspects.items():
            totals[name] = totals.get(name, 0) + steps
        progress = replace(progress, suspects=totals)
    if p.mean_steps:  # on_violation="mean": steps the rule could not hold for
        window["mean_steps"] = p.mean_steps
        progress = replace(progress, mean_steps=progress.mean_steps + p.mean_steps)
    return replace(book, progress=progress), window


def on_eval(book: RunBook, r: Report, d: Decision) -> RunBook:
    """An evaluation (run in the background on rank 0) finished: its result goes
    into the history at the step whose weights it evaluated."""
    e = EvalData.of(r)
    result: dict[str, Any] = {"eval_time": r.time}  # when it finished
    if e.eval is not None:
        result["eval"] = e.eval
    if e.eval_error is not None:
        result["eval_error"] = e.eval_error
    history = list(book.progress.history)
    for i in range(len(history) - 1, -1, -1):
        if history[i]["step"] == e.eval_step:
            history[i] = {**history[i], **result}
            return replace(book, progress=replace(book.progress, history=tuple(history)))
        if history[i]["step"] < e.eval_step:
            break
    point = {"step": e.eval_step, "time": r.time, "loss": None, "steps_per_s": None}
    point.update(samples_per_s=None, world_size=None, **result)
    bisect.insort(history, point, key=lambda q: q["step"])
    return replace(book, progress=trim_history(replace(book.progress, history=tuple(history))))


def trim_history(progress: Progress) -> Progress:
    """``progress`` with its history within :data:`HISTORY_MAX` points: every other
    progress point goes (and later ones are kept half as often); evaluations, sparse
    and wanted, stay unless they alone fill half of it, then every other one goes too."""
    if len(progress.history) <= HISTORY_MAX:
        return progress
    evals = [q for q in progress.history if "eval_time" in q]
    points = [q for q in progress.history if "eval_time" not in q][::2]
    if len(evals) > HISTORY_MAX // 2:
        evals = evals[::-2][::-1]  # the newest stays
    history = tuple(sorted(points + evals, key=lambda q: q["step"]))
    return replace(progress, history=history, history_every=progress.history_every * 2)
