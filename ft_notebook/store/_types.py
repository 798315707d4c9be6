"""What the store hands back: descriptions of checkpoints, and checkpoints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CheckpointInfo:
    """A committed checkpoint, described by its manifest."""

    run: str
    step: int
    #: Wall time of the commit (seconds since the epoch).
    time: float
    #: Bytes of every file it references (blobs shared with others included).
    nbytes: int
    pinned: bool
    #: The caller's metadata given to ``save`` (epoch, data cursor, ...).
    metadata: dict[str, Any]
    #: The location (URL or folder) it was found at or written to.
    location: str


@dataclass(frozen=True)
class Checkpoint(CheckpointInfo):
    """A checkpoint that was read and verified; ``state`` is what was saved."""

    state: dict[str, Any]
