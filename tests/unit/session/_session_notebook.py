"""A notebook run in-process: cells recorded, executed and snapshotted as IPython
would, and a "crash" that restores into a fresh session over the same store."""

from __future__ import annotations

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
        ns: dict[str, Any] = {}
        report = fresh.restore(ns, name)
        return ns, report
