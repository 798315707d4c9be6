"""Snapshots bound to a live IPython shell: cell events, auto mode, transactions.

The shell tells us each cell's code before it runs (kept for replay, with the random
state) and whether it succeeded; with auto mode on, every successful cell ends with
a snapshot. A transaction cell is bracketed by snapshots: the one before is what a
failure rolls back to, variables mutated in place included.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ft_notebook._notebook_key import notebook_key as key_of_path
from ft_notebook._paths import data_dir
from ft_notebook.exceptions import SnapshotError
from ft_notebook.session._restore import RestoreReport
from ft_notebook.session._session import NotebookSession

if TYPE_CHECKING:
    from ft_notebook.session._outcomes import SnapshotInfo, TransactionOutcome
    from ft_notebook.store import CheckpointStore


def snapshot_store() -> CheckpointStore:
    """The user's private store of notebook snapshots (the sessions prune it: they
    keep the newest full snapshot and the named ones)."""
    from ft_notebook.store import CheckpointStore

    return CheckpointStore(data_dir() / "snapshots", keep=None, publish_events=False)


def notebook_key(shell: Any) -> str:
    """A name for this notebook's snapshots: from its path when the kernel knows it."""
    return key_of_path(shell.user_ns.get("__session__") or os.environ.get("JPY_SESSION_NAME"))


class ShellSnapshots:
    """The snapshot machinery of one kernel."""

    def __init__(self, shell: Any, store: CheckpointStore, key: str) -> None:
        self.shell = shell
        self.key = key
        self.session = NotebookSession(store, key, renames=data_dir())
        self.auto = False
        self.last: SnapshotInfo | None = None
        self._in_transaction = False
        shell.events.register("pre_run_cell", self.pre_run_cell)
        shell.events.register("post_run_cell", self.post_run_cell)

    def close(self) -> None:
        self.shell.events.unregister("pre_run_cell", self.pre_run_cell)
        self.shell.events.unregister("post_run_cell", self.post_run_cell)

    def pre_run_cell(self, info: Any) -> None:
        code = self.shell.transform_cell(_without_ft_magics(info.raw_cell or ""))
        self.session.before_cell(self.shell.execution_count, code, self.shell.user_ns)

    def post_run_cell(self, result: Any) -> None:
        self.session.after_cell(self.shell.user_ns)
        if self.auto and result.success and not self._in_transaction:
            # the writing goes on in the background while the next cell runs
            self.last = self.session.snapshot(
                self.shell.user_ns,
                self.shell.execution_count,
                hidden=self.shell.user_ns_hidden,
                background=True,
                settings={"auto": True},
            )

    def save(self, name: str | None = None, names: list[str] | None = None) -> SnapshotInfo:
        info = self.session.snapshot(
            self.shell.user_ns,
            self.shell.execution_count,
            name=name,
            names=names,
            hidden=self.shell.user_ns_hidden,
            settings={"auto": self.auto},
        )
        self.last = info  # committed: an explicit save returns once it is durable
        return info

    def restore(
        self,
        name: str = "latest",
        names: list[str] | None = None,
        *,
        source: str | None = None,
        process_state: bool = True,
    ) -> RestoreReport:
        """Restore ``name``; if this notebook has no such snapshot because it was
        renamed in Jupyter (a kernel started since gets the new name), from the
        snapshots it has under its old name. A whole restore turns auto snapshots
        on again if the kernel that took the snapshot had them on: otherwise the
        newest snapshot would stay the dead kernel's while later cells run."""
        report = self._restore(name, names, source, process_state)
        if names is None and report.settings.get("auto") and not self.auto:
            self.auto = report.auto_resumed = True
        return report

    def _restore(
        self, name: str, names: list[str] | None, source: str | None, process_state: bool
    ) -> RestoreReport:
        namespace = self.shell.user_ns
        try:
            return self.session.restore(
                namespace, name, names, source=source, process_state=process_state
            )
        except SnapshotError:
            if source is not None or self.session.has(name, self.key):
                raise
            for earlier in self._renamed_from():
                if self.session.has(name, earlier):
                    report = self.session.restore(
                        namespace, name, names, source=earlier, process_state=process_state
                    )
                    report.renamed_from = earlier
                    return report
            raise

    def listing(self) -> tuple[list[dict[str, Any]], str | None]:
        """This notebook's snapshots, or, with none, those under its name before a
        rename in Jupyter (the ones `restore` would bring back); and that old key."""
        rows = self.session.list()
        for earlier in [] if rows else self._renamed_from():
            rows = self.session.list(earlier)
            if rows:
                return rows, earlier
        return rows, None

    def _renamed_from(self) -> list[str]:
        from ft_notebook import _renames

        return _renames.renamed_from(data_dir(), self.key)

    def transaction(self, cell: str, *, name: str | None, retries: int) -> TransactionOutcome:
        """Run ``cell``; on an exception put every variable back as it was, then retry."""
        from ft_notebook.session._outcomes import TransactionOutcome

        self._in_transaction = True
        try:
            before = self.save()
            # one line up front: the line numbers of the cell as shown, %%ft line included;
            # cached by IPython's compiler, so a traceback shows the cell's own lines
            source = "\n" + self.shell.transform_cell(cell)
            filename = self.shell.compile.cache(source, self.shell.execution_count)
            code = compile(source, filename, "exec")
            error: BaseException | None = None
            rolled: tuple[str, ...] = ()
            removed: tuple[str, ...] = ()
            for attempt in range(1, retries + 2):
                try:
                    exec(code, self.shell.user_ns)
                except Exception as e:
                    error = e
                    rolled, removed = self._roll_back(before)
                    continue
                return TransactionOutcome(self.save(name), attempt, (), (), None)
            return TransactionOutcome(None, retries + 1, rolled, removed, error)
        finally:
            self._in_transaction = False

    def _roll_back(self, before: SnapshotInfo) -> tuple[tuple[str, ...], tuple[str, ...]]:
        ns = self.shell.user_ns
        changed, added = self.session.changes_since_latest(ns, hidden=self.shell.user_ns_hidden)
        for name in added:
            ns.pop(name, None)
        if changed:
            self.session.restore(ns, before.name, changed)
        return tuple(changed), tuple(added)

    def status(self) -> dict[str, Any]:
        return {
            "notebook": self.key,
            "auto": self.auto,
            "last": self.last,
            "error": self.session.last_error,
        }


def _without_ft_magics(raw: str) -> str:
    """A cell as a replay should run it: the body of ``%%ft checkpoint``, without
    ``%ft`` lines (a replay must not take snapshots or drive clusters)."""
    lines = raw.splitlines()
    if lines and lines[0].lstrip().startswith("%%ft"):
        lines = lines[1:]
    return "\n".join(line for line in lines if not line.lstrip().startswith("%ft"))
