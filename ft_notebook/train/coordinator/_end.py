"""The end of a run: completed, failed or cancelled.

:func:`finish` is the one writer of ``RunBook.finished_at`` and decides what ending a
run does, once: the last state and progress published, the stop plan sent to every
rank, the run's hold on the cluster released. The ranks' own word that the run
ended (``done`` and ``error`` reports) is read here too, and ``RunBook.errors``.
"""

from __future__ import annotations

from dataclasses import replace

from ft_notebook.events import RunState
from ft_notebook.train.coordinator import _generations, _progress_reports, _status
from ft_notebook.train.coordinator._actions import Decision, Hold, PublishProgress
from ft_notebook.train.coordinator._book import RunBook, put
from ft_notebook.train.protocol import How, Report
from ft_notebook.train.report_kinds import DoneData, ErrorData


def finish(book: RunBook, state: RunState, reason: str, d: Decision) -> RunBook:
    """End the run in ``state`` (a finished one stays as it ended)."""
    if book.finished:
        return book
    book = replace(book, finished_at=d.now, spec=b"")  # its factories are not needed any more
    book = _status.set_state(book, state, reason, d)
    d.do(PublishProgress())
    book = _generations.new_plan(book, [], How.FORM, d, stop=state.value.lower())
    d.do(Hold(release=True))
    return book


def on_done(book: RunBook, r: Report, d: Decision) -> RunBook:
    done = DoneData.of(r)
    book = _progress_reports.add_robust_window(book, done)[0]  # steps after the last progress
    book = _status.stepped(book, r.step, d)
    epoch = done.epoch if done.epoch is not None else book.epoch  # None: not told
    book = _progress_reports.told(book, epoch, done.loss if done.loss is not None else book.loss)
    if done.checkpoint is not None:  # the run's last one
        book = _status.checkpointed(book, done.checkpoint, d)
    return finish(book, RunState.COMPLETED, f"{r.step} steps", d)


def on_error(book: RunBook, r: Report, d: Decision) -> RunBook:
    error = ErrorData.of(r)
    said = {"error": error.error, "traceback": error.traceback}
    book = replace(book, errors=put(book.errors, r.name, said))
    return finish(book, RunState.FAILED, f"{r.name}: {error.error}", d)
