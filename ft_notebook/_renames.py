"""Notebooks renamed or moved in Jupyter, so that their snapshots follow them.

A notebook's snapshots are kept under a key made from its path (``_notebook_key``).
Renamed, it gets a new key, and a kernel started for it afterwards (after a crash, say)
would find none of them. The server extension hears each rename from Jupyter's
contents service and records ``new key -> old key`` here, in the user's private data
folder; a restore that finds nothing under its own key follows these records back.

The file is plain JSON that only the server extension writes (atomically: a temporary
file, then a rename); a reader treats anything that does not parse as no renames.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ft_notebook._paths import checked_name

FILE = "notebook-renames.json"
#: Renames kept: the oldest go first (a notebook renamed long ago has been restored
#: under its new name since, or its snapshots are gone).
MOST = 500
#: Renames followed back from one key, at most.
DEPTH = 20


def record(folder: Path, old_key: str, new_key: str) -> None:
    """Remember that the notebook with snapshots under ``old_key`` is now ``new_key``."""
    checked_name(old_key, "notebook key")
    checked_name(new_key, "notebook key")
    if old_key == new_key:
        return
    entries = [e for e in _read(folder) if e["to"] != new_key]
    entries.append({"to": new_key, "from": old_key, "time": time.time()})
    path = folder / FILE
    tmp = folder / f".{FILE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"renames": entries[-MOST:]}, f)
    os.replace(tmp, path)


def renamed_from(folder: Path, key: str) -> list[str]:
    """The keys the notebook now under ``key`` had before, the latest first."""
    # the newest record of each name wins
    earlier = {str(e["to"]): str(e["from"]) for e in _read(folder)}
    out: list[str] = []
    seen = {key}
    while key in earlier and len(out) < DEPTH:
        key = earlier[key]
        if key in seen:  # renamed back and forth
            break
        seen.add(key)
        out.append(key)
    return out


def renamed_keys(folder: Path) -> set[str]:
    """Every key recorded as the new name of another (one read of the record)."""
    return {str(e["to"]) for e in _read(folder)}


def _read(folder: Path) -> list[dict[str, object]]:
    try:
        with open(folder / FILE, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return []
    entries = doc.get("renames") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        return []
    good = []
    for e in entries:
        try:
            if isinstance(e, dict):
                new, old = checked_name(e["to"]), checked_name(e["from"])
                good.append({"to": new, "from": old, "time": float(e["time"])})
        except (KeyError, TypeError, ValueError):  # UnsafeName is a ValueError
            continue
    return good
