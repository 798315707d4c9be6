"""A notebook run in-process: cells recorded, executed and snapshotted as IPython
would, and a "crash" that restores into a fresh session over the same store."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

from ft_notebook.session import NotebookSession
from ft_notebook.store import CheckpointStore


class Notebook:
    """Runs cells the way IPython would: record, exec, snapshot."""

    def __init__(self, root: Path) -> None:
        self.store = CheckpointStore(root, keep=1, publish_events=False)
        self.session = NotebookSession(self.store, "nb")
        self.ns: dict[str, Any] = {}
        self.count = 0
        self.written = 0

    def run(self, code: str, snapshot: bool = True) -> None:
        self.count += 1
        self.session.before_cell(self.count, code, self.ns)
        exec(code, self.ns)
        self.session.after_cell(self.ns)
        if snapshot:
            self.written += self.session.snapshot(self.ns, self.count).bytes_written

    def crash_and_restore(self, name: str = "latest") -> tuple[dict[str, Any], Any]:
        fresh = NotebookSession(self.store, "nb")
        # as a kernel's namespace is: with its builtins (the frames a pickle loads in
        # are made in it, see SnapshotUnpickler.load_as_notebook)
        ns: dict[str, Any] = {"__builtins__": builtins}
        report = fresh.restore(ns, name)
        return ns, report


def user_values(ns: dict[str, Any]) -> dict[str, Any]:
    """A restored namespace's variables, without the builtins a kernel's has."""
    return {k: v for k, v in ns.items() if k != "__builtins__"}
