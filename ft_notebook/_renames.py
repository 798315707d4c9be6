"""Notebooks renamed or moved in Jupyter, so that their snapshots follow them.

A notebook's snapshots are kept under a key made from its path (``_notebook_key``).
Renamed, it gets a new key, and a kernel started for it afterwards (after a crash, say)
would find none of them. The server extension hears each rename from Jupyter's
contents service and records ``new key -> old key`` here, in the user's private data
folder; a restore that finds nothing under its own key follows these records back.

The file is plain JSON that only the server extension writes (atomically: a temporary
file, then a rename, under a lock file beside it); a reader treats anything that does
not parse as no renames.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import threading
import time
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import NamedTuple

from ft_notebook._paths import checked_name

FILE = "notebook-renames.json"
LOCK = ".notebook-renames.lock"
#: Renames kept: the oldest go first (a notebook renamed long ago has been restored
#: under its new name since, or its snapshots are gone).
MOST = 500
#: Renames followed back from one key, at most.
DEPTH = 20
_THREADS = threading.Lock()


class Rename(NamedTuple):
    """The notebook with snapshots under ``old`` became ``new`` at ``time``."""

    new: str
    old: str
    time: float


def record(folder: Path, old_key: str, new_key: str) -> None:
    """Remember that the notebook with snapshots under ``old_key`` is now ``new_key``."""
    record_moves(folder, [(old_key, new_key)])


def record_moves(
    folder: Path, moves: Iterable[tuple[str, str]], having: Collection[str] | None = None
) -> list[tuple[str, str]]:
    """Record each ``(old key, new key)`` of ``moves`` (a notebook, or every notebook of
    a moved folder); with ``having``, only those whose old key is in it or was itself
    renamed from another. What was recorded.

    Read, changed and written back in one go under a lock: the server follows renames
    on worker threads, and two Jupyter servers of one user share the file. A thread
    lock as well as an ``flock``, since over NFS ``flock`` does not order one
    process's threads; and the ``having`` test is made under them, so that a rename
    into ``old key`` recorded a moment before by another thread counts.
    """
    moves = [(checked_name(o, "notebook key"), checked_name(n, "notebook key")) for o, n in moves]
    with _THREADS:
        lock = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed, or if this process dies
            entries = _read(folder)
            known = None if having is None else {*having, *(r.new for r in entries)}
            now = time.time()
            done = [(o, n) for o, n in moves if o != n and (known is None or o in known)]
            if done:
                moved = {n for _, n in done}
                entries = [r for r in entries if r.new not in moved]
                entries += [Rename(n, o, now) for o, n in done]
                tmp = folder / f".{FILE}.{os.getpid()}.tmp"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump({"renames": [_to_json(r) for r in entries[-MOST:]]}, f)
                os.replace(tmp, folder / FILE)
        finally:
            os.close(lock)
    return done


def renamed_from(folder: Path, key: str) -> list[str]:
    """The keys the notebook now under ``key`` had before, the latest first."""
    return [old for old, _ in history(folder, key)]


def history(folder: Path, key: str) -> list[tuple[str, float]]:
    """The keys the notebook now under ``key`` had before, the latest first, each with
    the time it was renamed away from that key: the snapshots it took there are
    the ones from before that time.

    A rename into one of those keys after the notebook left it was another notebook's
    (one renamed to the free name): the walk stops there rather than take that
    notebook's snapshots for this one's.
    """
    # the newest record of each name wins (record() keeps no other)
    into = {r.new: r for r in _read(folder)}
    out: list[tuple[str, float]] = []
    seen = {key}
    left = math.inf  # when the notebook left ``key``
    while key in into and len(out) < DEPTH:
        _, earlier, when = into[key]
        if when > left or earlier in seen:  # another notebook's, or renamed back and forth
            break
        key, left = earlier, when
        seen.add(key)
        out.append((key, when))
    return out


def _to_json(rename: Rename) -> dict[str, object]:
    return {"to": rename.new, "from": rename.old, "time": rename.time}


def _read(folder: Path) -> list[Rename]:
    try:
        with open(folder / FILE, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return []
    entries = doc.get("renames") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        return []
    good: list[Rename] = []
    for e in entries:
        try:
            if isinstance(e, dict):
                new, old = checked_name(e["to"]), checked_name(e["from"])
                when = float(e["time"])
                if math.isfinite(when):  # an infinite time would undo the time checks
                    good.append(Rename(new, old, when))
        except (KeyError, TypeError, ValueError):  # UnsafeName is a ValueError
            continue
    return good
