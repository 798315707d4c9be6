"""What a user is told when the snapshot asked for is not there.

The message names the snapshots the notebook has. When it has none, the notebook
may have been renamed or moved since they were taken, and they are kept under its
old key: the message then lists the other notebooks with snapshots, newest first,
and gives the ``%ft restore --from`` line for the newest. Listing every notebook
reads every manifest, so it happens only here, on the way to an error.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ft_notebook.exceptions import SnapshotError

if TYPE_CHECKING:
    from ft_notebook.store import CheckpointStore


def missing_snapshot(store: CheckpointStore, label: str, notebook: str) -> SnapshotError:
    """The error for ``notebook`` (a key) having no snapshot named ``label``."""
    infos = store.list(notebook)
    known = sorted({str(i.metadata.get("name", "?")) for i in infos}) or ["none yet"]
    text = (
        f"There is no snapshot {label!r} of notebook {notebook!r} (snapshots: "
        f"{', '.join(known)}). Take one with `%ft save` or turn on `%ft auto on`."
    )
    others = [] if infos else _other_notebooks(store, notebook)
    if others:  # a notebook renamed or moved since: its snapshots are under its old key
        text += (
            f" Other notebooks have snapshots, newest first: {', '.join(others)}. If "
            f"this notebook was renamed or moved, restore its old state with "
            f"`%ft restore --from {others[0].split()[0]}`."
        )
    return SnapshotError(text)


def _other_notebooks(store: CheckpointStore, notebook: str, most: int = 5) -> list[str]:
    """``key (N min ago)`` of the notebooks with snapshots in the store, newest first."""
    newest = []
    for key in store.runs():
        infos = store.list(key) if key != notebook else []
        if infos:
            newest.append((infos[-1].time, key))
    now = time.time()
    return [f"{key} ({_ago(now - t)})" for t, key in sorted(newest, reverse=True)[:most]]


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"
