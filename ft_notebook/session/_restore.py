"""Bring a snapshot's variables back, all or nothing.

Variables are rebuilt into a fresh dict: pickled ones from their blobs (references to
other variables resolved first, so aliases and views come back as such), the others
by replaying the cell that made them with the random state it saw. Each comes back
into the user's namespace as soon as it is rebuilt (the notebook's functions are
bound to that namespace, and a reducer defined in the notebook may call them while
later variables load); a restore that fails puts back what the namespace held, so a
failure changes nothing.

A replay runs on copies of its inputs (rebuilt a second time from the snapshot), so
it cannot change a restored variable, a generator it draws from included. Its result
must match the content fingerprint taken at snapshot time; one that does not, or
that cannot be fingerprinted, is reported and not restored: never silently wrong.
A variable whose pickle does not load (its class is gone, a file it held was
deleted) is reported lost with the error; the others come back.
"""

from __future__ import annotations

import contextlib
import io
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ft_notebook.exceptions import SnapshotError, StoreError
from ft_notebook.session._capture import VarEntry, buffer_key, pickle_key
from ft_notebook.session._namespace import (
    capture_rng,
    inputs_of,
    restore_rng,
    set_generator_state,
)
from ft_notebook.session._objects import BufferRecord, SnapshotUnpickler, rebuild_buffer


@dataclass
class RestoreReport:
    """What a restore did, variable by variable."""

    restored: list[str] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    different: dict[str, str] = field(default_factory=dict)  # name -> what differed
    lost: dict[str, str] = field(default_factory=dict)  # name -> why
    types: dict[str, str] = field(default_factory=dict)  # name -> type, of those not back
    #: The notebook's key before a rename, when the snapshot came from there.
    renamed_from: str | None = None
    #: name -> how pickling changes it: restored, but not as the notebook had it
    changed_by_pickling: dict[str, str] = field(default_factory=dict)
    #: process-wide state put back: "random", "numpy.random", "matplotlib.rcParams"...
    process: list[str] = field(default_factory=list)
    #: the ft settings of the kernel that took the snapshot ({"auto": True})
    settings: dict[str, Any] = field(default_factory=dict)
    #: whether the restore turned auto snapshots on again, as the dead kernel had them
    auto_resumed: bool = False


class Blobs(Protocol):
    """Where a snapshot's blobs come from, verified (the store's RawCheckpoint)."""

    def read(self, key: str) -> memoryview: ...

    def read_into(self, key: str, out: memoryview) -> None: ...


class Rebuilder:
    """Rebuilds the variables of one snapshot manifest."""

    def __init__(
        self,
        entries: Mapping[str, VarEntry],
        cells: Mapping[str, Mapping[str, Any]],
        blobs: Blobs,
        base_namespace: Mapping[str, Any],
        namespace: dict[str, Any] | None = None,
        publish: frozenset[str] = frozenset(),
    ) -> None:
        self._entries = entries
        self._cells = cells  # key -> {"code": ..., "count": ..., "rng": ...}
        self._blobs = blobs
        self._base = base_namespace  # what replayed cells see besides restored variables
        # what the notebook's functions come back bound to (see ``_rebind``)
        self._namespace: dict[str, Any] = {} if namespace is None else namespace
        # names put into it as soon as they are rebuilt: a class's reducer defined in
        # the notebook runs while later variables load, and looks its names up there
        self._publish = publish
        self._values: dict[str, Any] = {}
        self._buffers: dict[str, Any] = {}
        self._tensors: dict[str, Any] = {}
        self._building: set[str] = set()
        self._replayed_cells: dict[str, dict[str, Any] | BaseException] = {}
        self._copies: list[Rebuilder] = []  # the rebuilders of replays' inputs
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
            if entry.how == "pickle" and entry.group:
                value = self._unpickle_group(entry)
            elif entry.how == "pickle" and entry.warning:
                value = self._replay_or_unpickle(entry)
            elif entry.how == "pickle":
                value = self._unpickle(entry)
                self.report.restored.append(name)
                # its refs are rebuilt by now: one that came back changed is in it
                held = next((r for r in entry.refs if r in self.report.changed_by_pickling), "")
                if held:
                    self.report.changed_by_pickling[name] = (
                        f"it holds `{held}`, which changes when pickled"
                    )
            else:
                value = self._replay(entry)
        except _Lost:
            self.report.types[name] = entry.type_name
            raise
        finally:
            self._building.discard(name)
        self._keep(name, value)
        return value

    def _keep(self, name: str, value: Any) -> None:
        self._values[name] = value
        if name in self._publish:
            self._namespace[name] = value

    def _unpickle(self, entry: VarEntry) -> Any:
        assert entry.pickle_digest is not None
        records = entry.buffers
        data = self._blobs.read(pickle_key(entry.pickle_digest))  # a damaged store: raises
        unpickler = SnapshotUnpickler(
            data,
            resolve_var=self._var,
            load_buffer=lambda key: self._buffer(records[key]),
            out_of_band=[self._buffer(records[key]) for key in entry.out_of_band],
            namespace=self._namespace,
            tensors=self._tensors,
        )
        try:
            return unpickler.load_as_notebook()
        except (_Lost, StoreError):
            raise
        except Exception as e:  # whatever the pickled class's code raises on loading
            self.report.lost[entry.name] = f"loading it raised {type(e).__name__}: {e}"[:600]
            raise _Lost(entry.name) from e

    def _replay_or_unpickle(self, entry: VarEntry) -> Any:
        """A value that pickling changes (see ``_roundtrip``): its cell replayed, if
        that gives the value the notebook had; else its pickled copy, reported."""
        if entry.content and entry.cell in self._cells:
            replay = entry._replace(how="replay", fingerprint=entry.content)
            try:
                return self._replay(replay)
            except _Lost:
                why = self.report.different.pop(entry.name, None)
                why = self.report.lost.pop(entry.name, why)
                note = f"; replaying its cell did not give it back either ({why})"
        else:
            note = ""
        value = self._unpickle(entry)
        self.report.restored.append(entry.name)
        how = entry.warning
        if not how.startswith("it shares memory"):
            how = f"it changes when pickled: {how}"
        self.report.changed_by_pickling[entry.name] = how + note
        return value

    def _unpickle_group(self, entry: VarEntry) -> Any:
        """The variables of a cycle, loaded together (see ``_cycles``)."""
        values = self._unpickle(entry)
        for member, value in zip(entry.group, values, strict=True):
            self._keep(member, value)
            self.report.restored.append(member)
        return self._values[entry.name]

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
            self.report.lost[entry.name] = entry.reason or "the cell that made it was not recorded"
            raise _Lost(entry.name)
        count = cell.get("count", "?")
        scratch = self._replayed_cells.get(entry.cell)
        if scratch is None:
            scratch = self._replay_cell(entry.cell, cell, exclude=entry.name)
        if isinstance(scratch, BaseException):
            self.report.lost[entry.name] = (
                f"replaying cell [{count}] raised {type(scratch).__name__}: {scratch}"
            )
            raise _Lost(entry.name)
        if entry.name not in scratch:
            self.report.lost[entry.name] = f"replaying cell [{count}] did not define it"
            raise _Lost(entry.name)
        value = scratch[entry.name]
        from ft_notebook.session._pickler import content_fingerprint  # replays are rare

        try:
            seen = content_fingerprint(value, id(scratch))
        except Exception as e:
            self.report.lost[entry.name] = (
                f"its replay (cell [{count}]) cannot be checked: {type(e).__name__}: {e}"
            )
            raise _Lost(entry.name) from e
        if seen != entry.fingerprint:
            self.report.different[entry.name] = (
                f"replaying cell [{count}] gave another value than the notebook had (the "
                f"cell read something that changed since, or a later cell changed it)"
            )
            raise _Lost(entry.name)
        self.report.replayed.append(entry.name)
        return value

    def _replay_cell(
        self, key: str, cell: Mapping[str, Any], exclude: str
    ) -> dict[str, Any] | BaseException:
        """Run a recorded cell once, in a scratch namespace; every variable it made shares
        it. Its inputs are copies: rebuilt by a second rebuilder, which shares nothing
        with this one, so the replay cannot change what this restore returns."""
        scratch = dict(self._base)
        copies = Rebuilder(self._entries, self._cells, self._blobs, self._base, scratch)
        self._copies.append(copies)
        for other in inputs_of(cell["code"]) & set(self._entries):
            if other != exclude:
                with contextlib.suppress(_Lost):  # the replay may manage without it
                    scratch[other] = copies._var(other)
        for other, state in cell.get("generators", {}).items():
            if other in scratch:  # where the generators it drew from stood when it ran
                set_generator_state(scratch[other], state)
        saved = capture_rng()
        result: dict[str, Any] | BaseException = scratch
        try:
            restore_rng(cell["rng"])
            code = compile(cell["code"], f"<replay of cell {cell.get('count', '?')}>", "exec")
            exec(code, scratch)
        except Exception as e:
            result = e
        finally:
            restore_rng(saved)
        self._replayed_cells[key] = result
        return result

    def close_scratch(self, kept: Mapping[str, Any]) -> None:
        """Close the files replays and their input copies opened and nothing kept: a
        replay reopens every file its cell opened, restored or not. A file a restored
        generator reads from is kept open (it is in the generator's frame)."""
        keep = _held(list(kept.values())) | {id(v) for v in self._base.values()}
        spaces = [s for s in self._replayed_cells.values() if isinstance(s, dict)]
        for copies in self._copies:
            copies.close_scratch(kept)
            spaces.append(copies._values)
        for space in spaces:
            for value in space.values():
                if isinstance(value, io.IOBase) and id(value) not in keep:
                    value.close()


def _held(values: list[Any], depth: int = 3) -> set[int]:
    """The ids of ``values`` and of what their generators' frames hold, a few levels
    down (a generator over a file, a generator over that generator)."""
    held = {id(v) for v in values}
    if depth:
        for v in values:
            frame = getattr(v, "gi_frame", None) if isinstance(v, types.GeneratorType) else None
            if frame is not None:
                held |= _held(list(frame.f_locals.values()), depth - 1)
    return held


class _Lost(Exception):
    """A variable could not be rebuilt; the report says why."""


def rebuild(
    entries: Mapping[str, VarEntry],
    cells: Mapping[str, Mapping[str, Any]],
    blobs: Blobs,
    base_namespace: Mapping[str, Any],
    names: list[str],
    namespace: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], RestoreReport]:
    """Rebuild ``names``; what cannot come back is in the report, not in the result.
    The notebook's functions are bound to ``namespace``, and ``names`` are put into
    it as they come back (the caller puts back what it held if this raises)."""
    rebuilder = Rebuilder(entries, cells, blobs, base_namespace, namespace, frozenset(names))
    values: dict[str, Any] = {}
    report = rebuilder.report
    for name in names:
        try:
            values[name] = rebuilder._var(name)
        except _Lost as e:
            if name not in report.lost and name not in report.different:
                report.lost[name] = f"it refers to {e.args[0]!r}, which could not be restored"
                report.types.setdefault(name, entries[name].type_name)
    rebuilder.close_scratch(values)
    return values, report
