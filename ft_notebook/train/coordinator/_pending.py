"""The one writer of ``RunBook.recovery.pending``, a recovery under way: opened by a
loss (:mod:`._generations` decides when), grown by the losses that come before it
completes (one recovery, with all their causes), closed when rank 0 commits the first
step of the generation made for it (:mod:`._recoveries` decides when)."""

from __future__ import annotations

from dataclasses import replace

from ft_notebook.train.coordinator._book import Pending, RunBook
from ft_notebook.train.protocol import Plan


def opened(book: RunBook, names: list[str], cause: str, workers_before: int, now: float) -> RunBook:
    """Members ``names`` were lost for ``cause`` at ``now``."""
    said = f"{', '.join(names)}: {cause}"
    pending = book.recovery.pending
    if pending is None:
        pending = Pending(said, now, workers_before, book.highest_step, tuple(names))
    else:
        pending = replace(
            pending, cause=f"{pending.cause}; {said}", lost=pending.lost + tuple(names)
        )
    return replace(book, recovery=replace(book.recovery, pending=pending))


def made_for(book: RunBook, plan: Plan | None) -> RunBook:
    """``plan`` is the generation made for the recovery under way."""
    pending = book.recovery.pending
    if pending is None:
        return book
    return replace(book, recovery=replace(book.recovery, pending=replace(pending, made=plan)))


def closed(book: RunBook) -> RunBook:
    return replace(book, recovery=replace(book.recovery, pending=None))
