"""Bring a snapshot's variables back, all or nothing.

Variables are rebuilt into a fresh dict: pickled ones from their blobs (references to
other variables resolved first, so aliases and views come back as such), the others
by replaying the cell that made them with the random state it saw. The user's
namespace is touched only once everything was rebuilt, so a failure changes nothing.
A replay whose result does not match the description taken at snapshot time is
reported as different and not restored: never silently wrong.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ft_notebook.exceptions import SnapshotError
from ft_notebook.session._capture import VarEntry, buffer_key, pickle_key
from ft_notebook.session._namespace import capture_rng, describe, restore_rng
from ft_notebook.session._objects import BufferRecord, SnapshotUnpickler, rebuild_buffer


@dataclass
class RestoreReport:
    """What a restore did, variable by variable."""

    restored: list[str] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    different: dict[str, str] = field(default_factory=dict)  # name -> what differed
    lost: dict[str, str] = field(default_factory=dict)  # name -> why
    #: The notebook's key before a rename, when the snapshot came from there.
    renamed_from: str | None = None


class Blobs(Protocol):
    """Where a snapshot's blobs come from, verified (the store's RawCheckpoint)."""

    def read(self, key: str) -> memoryview: ...

    def read_into(self, key: str, out: memoryview) -> None: ...


class Rebuilder:
    """Rebuilds the variables of one snapshot manifest."""

    def __init__(
        self,
        entries: Mapping[str, VarEntry],
        cells: Mapping[int, Mapping[str, Any]],
        blobs: Blobs,
        base_namespace: Mapping[str, Any],
    ) -> None:
        self._entries = entries
        self._cells = cells  # execution count -> {"code": ..., "rng": ...}
        self._blobs = blobs
        self._base = base_namespace  # what replayed cells see besides restored variables
        self._values: dict[str, Any] = {}
        self._buffers: dict[str, Any] = {}
        self._building: set[str] = set()
        self._replayed_cells: dict[int, dict[str, Any] | BaseException] = {}
        self.report = RestoreReport()

    def _var(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        entry = self._entries.get(name)
        if entry is None:
            raise SnapshotError(f"The snapshot refers to a variable {name!r} it does not hold.")
        if name in self._building:  # variables stored apart that refer to each other
            self.report.lost.setdefault(
                name, f"it is part of a reference cycle between {sorted(self._building)}"
            )
            raise _Lost(name)
        self._building.add(name)
        try:
            if entry.how == "pickle":
                value = self._unpickle(entry)
                self.report.restored.append(name)
            else:
                value = self._replay(entry)
        finally:
            self._building.discard(name)
        self._values[name] = value
        return value

    def _unpickle(self, entry: VarEntry) -> Any:
        assert entry.pickle_digest is not None
        records = entry.buffers
        unpickler = SnapshotUnpickler(
            self._blobs.read(pickle_key(entry.pickle_digest)),
            resolve_var=self._var,
            load_buffer=lambda key: self._buffer(records[key]),
        )
        return unpickler.load()

    def _buffer(self, record: BufferRecord) -> Any:
        found = self._buffers.get(record.key)
        if found is None:
            found = self._buffers[record.key] = rebuild_buffer(
                record, lambda digest, out: self._blobs.read_into(buffer_key(digest), out)
            )
        return found

    def _replay(self, entry: VarEntry) -> Any:
        cell = self._cells.get(entry.cell)
        if entry.how == "lost" or cell is None:
            reason = entry.reason or f"the cell that made it (#{entry.cell}) was not recorded"
            self.report.lost[entry.name] = reason
            raise _Lost(entry.name)
        scratch = self._replayed_cells.get(entry.cell)
        if scratch is None:
            scratch = self._replay_cell(entry.cell, cell, exclude=entry.name)
        if isinstance(scratch, BaseException):
            self.report.lost[entry.name] = (
                f"replaying cell {entry.cell} raised {type(scratch).__name__}: {scratch}"
            )
            raise _Lost(entry.name)
        if entry.name not in scratch:
            self.report.lost[entry.name] = f"replaying cell {entry.cell} did not define it"
            raise _Lost(entry.name)
        value = scratch[entry.name]
        seen = describe(value)
        if seen != entry.fingerprint:
            self.report.different[entry.name] = (
                f"snapshot had {entry.fingerprint!r}, replay gave {seen!r}"
            )
            raise _Lost(entry.name)
        self.report.replayed.append(entry.name)
        return value

    def _replay_cell(
        self, count: int, cell: Mapping[str, Any], exclude: str
    ) -> dict[str, Any] | BaseException:
        """Run a recorded cell once, in a scratch namespace; every variable it made shares it."""
        scratch = dict(self._base)
        for other in _inputs_of(cell["code"]) & set(self._entries):
            if other != exclude:
                with contextlib.suppress(_Lost):  # the replay may manage without it
                    scratch[other] = self._var(other)
        saved = capture_rng()
        result: dict[str, Any] | BaseException = scratch
        try:
            restore_rng(cell["rng"])
            exec(compile(cell["code"], f"<replay of cell {count}>", "exec"), scratch)
        except Exception as e:
            result = e
        finally:
            restore_rng(saved)
        self._replayed_cells[count] = result
        return result


class _Lost(Exception):
    """A variable could not be rebuilt; the report says why."""


def rebuild(
    entries: Mapping[str, VarEntry],
    cells: Mapping[int, Mapping[str, Any]],
    blobs: Blobs,
    base_namespace: Mapping[str, Any],
    names: list[str],
) -> tuple[dict[str, Any], RestoreReport]:
    """Rebuild ``names``; what cannot come back is in the report, not in the result."""
    rebuilder = Rebuilder(entries, cells, blobs, base_namespace)
    values: dict[str, Any] = {}
    report = rebuilder.report
    for name in names:
        try:
            values[name] = rebuilder._var(name)
        except _Lost as e:
            if name not in report.lost and name not in report.different:
                report.lost[name] = f"it refers to {e.args[0]!r}, which could not be restored"
    return values, report


def _inputs_of(code: str) -> set[str]:
    """Names a cell reads but does not bind itself: what its replay needs restored first."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    loaded: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
    return loaded - bound
