"""Notebook namespace snapshots: change detection, serialisation, replay.

:class:`NotebookSession` takes incremental snapshots of a kernel's variables and
restores them, faithfully (aliases, views, shared tensors) or by replaying the
cells that made what pickle cannot carry; the magics are its front door.
"""

from __future__ import annotations

from ft_notebook.session._restore import RestoreReport
from ft_notebook.session._session import NotebookSession, SnapshotInfo
from ft_notebook.session._shell import (
    ShellSnapshots,
    TransactionOutcome,
    notebook_key,
    snapshot_store,
)

__all__ = [
    "NotebookSession",
    "RestoreReport",
    "ShellSnapshots",
    "SnapshotInfo",
    "TransactionOutcome",
    "notebook_key",
    "snapshot_store",
]
