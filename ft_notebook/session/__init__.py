"""Notebook namespace snapshots: change detection, serialisation, replay.

:class:`NotebookSession` takes incremental snapshots of a kernel's variables and
restores them, faithfully (aliases, views, shared tensors) or by replaying the
cells that made what pickle cannot carry; the magics are its front door.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ft_notebook.session._restore import RestoreReport
from ft_notebook.session._session import NotebookSession
from ft_notebook.session._shell import ShellSnapshots, notebook_key, snapshot_store

if TYPE_CHECKING:
    from ft_notebook.session._outcomes import SnapshotInfo, TransactionOutcome

__all__ = [
    "NotebookSession",
    "RestoreReport",
    "ShellSnapshots",
    "SnapshotInfo",
    "TransactionOutcome",
    "notebook_key",
    "snapshot_store",
]


def __getattr__(name: str) -> object:
    # the records of taking snapshots load with the first one: a restore never needs them
    if name in ("SnapshotInfo", "TransactionOutcome"):
        from ft_notebook.session import _outcomes

        return getattr(_outcomes, name)
    raise AttributeError(f"module 'ft_notebook.session' has no attribute {name!r}")
