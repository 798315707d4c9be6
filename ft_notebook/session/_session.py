"""One notebook's snapshots: take them after cells, list them, restore them.

A snapshot is a checkpoint of the notebook's run in the :class:`CheckpointStore`:
its blobs (pickles and buffers, content-addressed) are written first and its
manifest last, so an interrupted snapshot leaves the previous one whole. Blobs of
unchanged variables are reused, not written again. Retention keeps the newest
snapshot and the named (pinned) ones.
"""

from __future__ import annotations

import importlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ft_notebook._paths import checked_name
from ft_notebook.exceptions import CheckpointNotFound, SnapshotError, StoreError
from ft_notebook.session._capture import Capturer, versions
from ft_notebook.session._connections import unsaid
from ft_notebook.session._format import FORMAT, check_versions, entry_from_json, entry_to_json
from ft_notebook.session._missing import missing_snapshot
from ft_notebook.session._namespace import (
    capture_rng,
    drop_unused_rng,
    generator_states,
    imported_modules,
    inputs_of,
    user_variables,
)
from ft_notebook.session._process import capture_process, restore_process
from ft_notebook.session._restore import RestoreReport, rebuild
from ft_notebook.session._roundtrip import pickling_notes

if TYPE_CHECKING:
    from pathlib import Path

    from ft_notebook.session._outcomes import SnapshotInfo
    from ft_notebook.store import CheckpointStore

logger = logging.getLogger(__name__)


class NotebookSession:
    """The snapshots of one notebook's kernel namespace, kept as run ``notebook``."""

    LATEST = "latest"

    def __init__(self, store: CheckpointStore, notebook: str, renames: Path | None = None) -> None:
        self.store = store
        self.notebook = checked_name(notebook, "notebook name")
        # the folder of the record of notebooks renamed in Jupyter (``_renames``)
        self._renames = renames
        self._left_behind_dropped = False
        # key -> the newest step this session restored from it (``source``)
        self._restored_from: dict[str, int] = {}
        self._capturer = Capturer()
        # A cell is keyed by its execution count and this kernel: counts start again
        # at 1 in the kernel that restores, and the restored cells keep their keys.
        self._kernel = secrets.token_hex(3)
        self._cells: dict[str, dict[str, Any]] = {}  # key -> code, count, random state
        self._made_by: dict[str, str] = {}  # variable -> key of the cell that bound it
        self._current = ""  # the key of the cell recorded last
        self._ids_before: dict[str, int] = {}
        self._writer: threading.Thread | None = None
        self.last_error: Exception | None = None
        # the newest committed step, read by the first snapshot: a kernel that only
        # restores need not read and verify every manifest of the notebook twice
        self._step: int | None = None

    def before_cell(
        self, count: int, code: str, namespace: Mapping[str, Any] | None = None
    ) -> None:
        """Record a cell's code and the random state it starts from, for replay, and
        which object each name of ``namespace`` is bound to before it runs."""
        self._current = f"{count}-{self._kernel}"
        cell: dict[str, Any] = {"code": code, "count": count, "rng": capture_rng(start_numpy=True)}
        if namespace is not None:
            generators = generator_states(namespace, inputs_of(code))
            if generators:
                cell["generators"] = generators
        self._cells[self._current] = cell
        self._ids_before = {} if namespace is None else {n: id(v) for n, v in namespace.items()}

    def after_cell(self, namespace: Mapping[str, Any] | None = None) -> None:
        """The cell recorded last has run: keep only the random states it used, and
        note it as the maker of each name it bound (not of those it changed in place:
        a replay of their maker must then fail its check, and does)."""
        cell = self._cells.get(self._current)
        if cell is None:
            return
        drop_unused_rng(cell["rng"])
        if namespace is not None and cell["code"].strip():  # not a cell of %ft lines only
            before = self._ids_before
            for name, value in namespace.items():
                if before.get(name) != id(value):
                    self._made_by[name] = self._current
        self._ids_before = {}
        makers = set(self._made_by.values())
        for key in [k for k in self._cells if k not in makers and k != self._current]:
            del self._cells[key]  # no variable can be replayed from it any more

    def snapshot(
        self,
        namespace: Mapping[str, Any],
        cell: int,
        *,
        name: str | None = None,
        names: Iterable[str] | None = None,
        hidden: Mapping[str, Any] | None = None,
        background: bool = False,
        settings: Mapping[str, Any] | None = None,
    ) -> SnapshotInfo:
        """Commit a snapshot of ``namespace`` (or of ``names`` in it) after cell ``cell``.

        With ``background``, the data that changed is copied (the pause the caller
        sees) and written and committed by a writer thread, so the next cell may
        change the variables at once; :meth:`wait` waits for it. At most one snapshot
        is in flight: the next one waits for the previous. ``settings``: the kernel's
        ft settings a restore takes on (``auto``).
        """
        self.wait()
        label = self.LATEST if name is None else checked_name(name, "snapshot name")
        if label == self.LATEST and name is not None:
            raise SnapshotError("'latest' always means the newest snapshot; choose another name.")
        variables = user_variables(namespace, hidden)
        capturer = self._capturer
        if names is not None:  # a partial snapshot must not disturb the series of latest
            wanted = list(names)
            missing = [n for n in wanted if n not in variables]
            if missing:
                raise SnapshotError(
                    f"There are no variables {missing} to snapshot; the namespace has "
                    f"{sorted(variables)}. Check the names given to --vars."
                )
            if name is None:
                raise SnapshotError(
                    "A snapshot of some variables needs a name: `%ft save NAME --vars ...`."
                )
            variables = {n: variables[n] for n in wanted}
            capturer = Capturer()
            capturer.known_blobs = set(self._capturer.known_blobs)
        bound = namespace if isinstance(namespace, dict) else None  # functions' globals
        capture = capturer.capture(variables, self._made_by, bound, self._cells)
        for n, e in capture.entries.items():
            if e.how == "replay" and e.cell not in self._cells:
                capture.entries[n] = e._replace(how="lost", reason=_unseen(e.reason))
        needed = {
            e.cell
            for e in capture.entries.values()
            if e.how == "replay" or (e.content and e.cell in self._cells)
        }
        size = sum(e.nbytes for e in capture.entries.values())
        now = time.time()
        state = {
            "format": FORMAT,
            "name": label,
            "cell": cell,
            "time": now,
            "versions": versions(),
            "variables": {n: entry_to_json(e) for n, e in capture.entries.items()},
            "modules": imported_modules(namespace),
            "cells": {c: self._cells[c] for c in sorted(needed)},
            "process": capture_process(),
            "settings": dict(settings or {}),
        }
        metadata = {"name": label, "cell": cell, "size": size, "variables": sorted(variables)}
        step = self._newest_step() + 1
        written = sum(memoryview(b).nbytes for b in capture.blobs.values())
        replayed = tuple(n for n, e in capture.entries.items() if e.how == "replay")
        lost = tuple(n for n, e in capture.entries.items() if e.how == "lost")
        # these load with the first snapshot: a kernel that only restores never needs them
        from ft_notebook.events import SnapshotCommitted, publish, session_topic
        from ft_notebook.session._outcomes import SnapshotInfo

        announce = SnapshotCommitted(
            label, written, len(capture.entries), lost, notebook=self.notebook
        )
        self._step = step
        if background:
            # bytes() copies: the writer must see the values as they are now
            capture = capture._replace(blobs={k: bytes(v) for k, v in capture.blobs.items()})

        def commit() -> None:
            try:
                self.store.save_raw(
                    self.notebook,
                    step,
                    state,
                    capture.blobs,
                    capture.reuse,
                    pin=name is not None,
                    metadata=metadata,
                )
            except BaseException:
                capturer.reset()  # what it believed stored may not be: next time, all of it
                raise
            capturer.committed(capture)
            publish(announce, session_topic())
            self._prune(label, step)
            if label == self.LATEST:
                self._drop_left_behind()

        if background:
            self._writer = threading.Thread(
                target=self._write_in_background, args=(commit,), name="ft-snapshot-writer"
            )
            self._writer.start()
        else:
            commit()
        return SnapshotInfo(
            label,
            cell,
            now,
            len(capture.entries),
            tuple(capture.changed),
            written,
            size,
            replayed,
            {
                **unsaid(lost, capture.entries, capture.changed),
                **pickling_notes(capture.entries),
            },
        )

    def wait(self) -> None:
        """Wait until the snapshot being written (if any) is committed or has failed."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.join()

    def _write_in_background(self, commit: Callable[[], None]) -> None:
        try:
            commit()
            self.last_error = None
        except Exception as e:  # the kernel goes on; the next snapshot stores everything
            self.last_error = e
            logger.error("ft: a snapshot could not be written: %s", e)

    def changes_since_latest(
        self, namespace: Mapping[str, Any], hidden: Mapping[str, Any] | None = None
    ) -> tuple[list[str], list[str]]:
        """Variables changed or deleted since the last snapshot, and those added."""
        return self._capturer.diff(user_variables(namespace, hidden))

    def restore(
        self,
        namespace: dict[str, Any],
        name: str = LATEST,
        names: Iterable[str] | None = None,
        *,
        source: str | None = None,
        process_state: bool = True,
    ) -> RestoreReport:
        """Put the snapshot's variables (or ``names`` of them) back into ``namespace``;
        ``source``: another notebook's key, e.g. this one's before it was renamed.
        With ``process_state``, a restore of all variables also puts back the random
        generators and matplotlib settings as they were (see ``_process``)."""
        label = checked_name(name, "snapshot name")
        notebook = self.notebook if source is None else checked_name(source, "notebook key")
        self.wait()
        try:
            step = self._step_of(label, notebook)
            raw = self.store.open_raw(notebook, step, allow_pickle=True)
        except CheckpointNotFound:
            raise missing_snapshot(self.store, label, notebook) from None
        manifest = raw.state
        check_versions(manifest)
        entries = {n: entry_from_json(n, v) for n, v in manifest["variables"].items()}
        wanted = list(entries) if names is None else list(names)
        unknown = [n for n in wanted if n not in entries]
        if unknown:
            raise SnapshotError(
                f"Snapshot {label!r} holds no variables {unknown}; it holds {sorted(entries)}. "
                f"Run `%ft list` to see the snapshots and their variables."
            )
        cells = dict(manifest.get("cells", {}))
        modules, missing = _import_modules(manifest.get("modules", {}))
        base = {**namespace, **modules}
        held = dict(namespace)  # put back if the restore fails half-way
        if names is None:
            namespace.update(modules)
        try:
            values, report = rebuild(entries, cells, raw, base, wanted, namespace)
        except BaseException as e:
            namespace.clear()
            namespace.update(held)
            if isinstance(e, StoreError):
                raise SnapshotError(f"Snapshot {label!r} could not be read: {e}") from e
            raise
        report.lost.update(missing)
        if names is None:
            values = {**modules, **values}
        namespace.update(values)
        report.settings = dict(manifest.get("settings", {}))
        if process_state and names is None and "process" in manifest:
            report.process = restore_process(manifest["process"])
        for n in values:  # a later snapshot replays them from the cells that made them
            key = entries[n].cell if n in entries else ""
            self._made_by[n] = key
            if key in cells:
                self._cells[key] = cells[key]
        if source is not None:
            self._restored_from[notebook] = max(step, self._restored_from.get(notebook, -1))
        return report

    def list(self, notebook: str | None = None) -> list[dict[str, Any]]:
        """The snapshots of this notebook (or of the one with key ``notebook``), oldest
        first."""
        rows = []
        key = self.notebook if notebook is None else checked_name(notebook, "notebook key")
        for info in self.store.list(key):
            meta = info.metadata
            rows.append(
                {
                    "name": meta.get("name", "?"),
                    "time": info.time,
                    "cell": meta.get("cell", 0),
                    "size": meta.get("size", 0),
                    "stored": info.nbytes,
                    "variables": meta.get("variables", []),
                }
            )
        return rows

    def _newest_step(self) -> int:
        if self._step is None:
            committed = self.store.list(self.notebook)
            self._step = committed[-1].step if committed else 0
        return self._step

    def has(self, label: str, notebook: str) -> bool:
        """Whether ``notebook`` (a key) has a snapshot named ``label``."""
        return any(i.metadata.get("name") == label for i in self.store.list(notebook))

    def _step_of(self, label: str, notebook: str) -> int:
        named = [i.step for i in self.store.list(notebook) if i.metadata.get("name") == label]
        if not named:
            raise missing_snapshot(self.store, label, notebook)
        return named[-1]

    def _prune(self, label: str, step: int) -> None:
        """Keep one snapshot per name: drop the older ones of ``label``. The newest
        ``latest`` names every blob its variables need, so older ones may go."""
        for info in self.store.list(self.notebook):
            if info.step < step and info.metadata.get("name") == label:
                self.store.delete(self.notebook, info.step)

    def _drop_left_behind(self) -> None:
        """With this notebook's newest state committed under its key, the ``latest``
        snapshots it left under its names before a rename in Jupyter are older states:
        retention drops them as it drops this key's own (named ones stay). Once per
        session. Those taken before the rename go, and those up to the one this
        session restored from there (a kernel still running under the old name writes
        after the rename); never a later one, which may be a new notebook's."""
        if self._renames is None or self._left_behind_dropped:
            return
        self._left_behind_dropped = True
        from ft_notebook import _renames

        try:
            for old, left in _renames.history(self._renames, self.notebook):
                taken = self._restored_from.get(old, -1)
                for info in self.store.list(old):
                    if info.metadata.get("name") != self.LATEST:
                        continue
                    if info.time < left or info.step <= taken:
                        self._drop(old, info.step)
        except Exception as e:  # the snapshot just taken is committed all the same
            logger.warning("ft: old snapshots of this notebook were not dropped: %s", e)

    def _drop(self, notebook: str, step: int) -> None:
        try:
            self.store.delete(notebook, step)
        except StoreError as e:  # gone already (another kernel pruned it), or unwritable
            logger.warning("ft: snapshot %s of %r was not dropped: %s", step, notebook, e)


def _import_modules(modules: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    found, missing = {}, {}
    for name, module in modules.items():
        try:
            found[name] = importlib.import_module(module)
        except Exception as e:  # any import-time failure: the module is what is lost
            missing[name] = f"import {module} failed: {type(e).__name__}: {e}"
    return found, missing


def _unseen(why: str) -> str:
    return (
        f"it cannot be pickled ({why}), and the cell that made it was not seen (it ran "
        f"before `%load_ext ft_notebook`, or in another kernel): run that cell again"
    )
