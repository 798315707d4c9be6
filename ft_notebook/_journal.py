"""Durable, append-only JSON-lines journals: the history of every event topic.

One file per topic in ``<data-dir>/journal/``. Appending takes an exclusive
``flock`` on the file, reads the last sequence number and writes the next event as
one line, so processes of one machine (kernel, scheduler, workers) share one gap-free
numbering. A process killed mid-write leaves at most a torn last line: the next
writer starts a fresh line and readers skip what does not parse. Lines are flushed,
not fsynced: events survive any process crash, and a machine crash may lose the
newest few (checkpoints and snapshots carry their own durable commit).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ft_notebook._paths import checked_name, data_dir
from ft_notebook.exceptions import EventError

logger = logging.getLogger(__name__)

_TAIL_BYTES = 64 * 1024


def journal_path(topic: str) -> Path:
    return data_dir() / "journal" / f"{checked_name(topic, 'event topic')}.jsonl"


class Journal:
    """The journal of one topic."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def for_topic(cls, topic: str) -> Journal:
        return cls(journal_path(topic))

    def append(self, make: Callable[[int], dict[str, Any]]) -> dict[str, Any]:
        """Append ``make(seq)`` with the next sequence number; return what was written."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            seq, torn = _last_seq(fd, self.path)
            record = make(seq + 1)
            try:
                line = json.dumps(record, separators=(",", ":"), allow_nan=False)
            except (TypeError, ValueError) as e:
                raise EventError(
                    f"Event {record.get('kind')!r} on {record.get('topic')!r} holds a "
                    f"value JSON cannot carry ({e}). Publish plain numbers, strings, "
                    f"lists and dicts."
                ) from e
            os.write(fd, (("\n" if torn else "") + line + "\n").encode())
            return record
        finally:
            os.close(fd)  # closing releases the lock

    def read(self, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Complete records from byte ``offset`` on, and the offset after the last one."""
        try:
            with self.path.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            return [], offset
        end = chunk.rfind(b"\n") + 1  # a torn last line is left for a later read
        records = []
        for raw in chunk[:end].splitlines():
            try:
                records.append(json.loads(raw))
            except ValueError:
                logger.warning("skipping a damaged line in %s: %r", self.path, raw[:80])
        return records, offset + end


def _last_seq(fd: int, path: Path) -> tuple[int, bool]:
    """The sequence number of the last complete line, and whether a torn line follows."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0, False
    start = max(0, size - _TAIL_BYTES)
    tail = os.pread(fd, size - start, start)
    torn = not tail.endswith(b"\n")
    for raw in reversed(tail.splitlines()[1:] if start else tail.splitlines()):
        try:
            return int(json.loads(raw)["seq"]), torn
        except (ValueError, KeyError, TypeError):
            continue
    if start:
        raise EventError(
            f"The journal {path} ends in over {_TAIL_BYTES} bytes that do not parse. "
            f"Move the file aside to start its topic afresh."
        )
    return 0, torn
