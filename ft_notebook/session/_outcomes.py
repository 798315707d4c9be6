"""What taking a snapshot and running a transaction cell report back.

Loaded with the first snapshot or ``%%ft checkpoint``: a kernel that only restores
(the first cell after a crash) never builds these records.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot that was taken: what it holds and what it cost."""

    name: str
    cell: int
    time: float
    variables: int
    changed: tuple[str, ...]
    bytes_written: int
    size: int
    replay: tuple[str, ...]
    #: name -> why: what this snapshot cannot bring back (neither stored nor replayable)
    unprotected: dict[str, str]


@dataclass(frozen=True)
class TransactionOutcome:
    """How a ``%%ft checkpoint`` cell ended: committed, or rolled back and why."""

    committed: SnapshotInfo | None
    attempts: int
    rolled_back: tuple[str, ...]
    removed: tuple[str, ...]
    error: BaseException | None
