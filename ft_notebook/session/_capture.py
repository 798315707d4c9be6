"""Incremental capture: which variables changed since the last snapshot, and their form.

Each variable is pickled with its bulk data taken out (see ``_objects``), so the
pickle is small and its hash, with the content hashes of the buffers, is an exact
change fingerprint. A variable whose fingerprint is unchanged costs nothing to
store; a changed one costs its small pickle plus the buffers whose content is new.
What pickle cannot carry is recorded for replay: the cell that last bound it, the
random state before that cell, and a content fingerprint the replay must match; a
value that cannot be fingerprinted either is recorded as lost, with the reason.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from ft_notebook.session._cycles import cycles
from ft_notebook.session._objects import BufferRecord, chunk_size, digest_of
from ft_notebook.session._versions import installed_version, versions
from ft_notebook.session._views import array_roots, unkept_views

__all__ = ["Capture", "Capturer", "VarEntry", "installed_version", "versions"]

# Values of these types are immutable: the same object means the same value.
_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), range)


class VarEntry(NamedTuple):
    """How one variable is kept in a snapshot (a NamedTuple: see BufferRecord)."""

    name: str
    how: str  # "pickle" | "replay" | "lost"
    type_name: str
    fingerprint: str  # of the pickle and its buffers; for a replay, of its content
    cell: str  # key of the cell that last bound the name ("" if none was seen)
    pickle_digest: str | None = None
    pickle_size: int = 0
    nbytes: int = 0
    buffers: Mapping[str, BufferRecord] = MappingProxyType({})
    refs: tuple[str, ...] = ()
    reason: str = ""  # why it is replayed or lost
    out_of_band: tuple[str, ...] = ()  # keys of its protocol 5 buffers, in pickle order
    #: the variables pickled together with it as one tuple (a cycle), in tuple order
    group: tuple[str, ...] = ()
    #: how its unpickled copy differs from the live object ("" when it does not)
    warning: str = ""
    #: with a warning: its content fingerprint, for a replay of its cell to match
    content: str = ""


def pickle_key(digest: str) -> str:
    return f"{digest}.pkl"


def buffer_key(digest: str) -> str:
    return f"{digest}.bin"


def blob_sizes(entries: Mapping[str, VarEntry]) -> dict[str, int]:
    """Every blob the entries need, by store key, with its size."""
    sizes = {}
    for entry in entries.values():
        if entry.pickle_digest is not None:
            sizes[pickle_key(entry.pickle_digest)] = entry.pickle_size
        for record in entry.buffers.values():
            for offset, digest in record.chunk_sizes():
                sizes[buffer_key(digest)] = chunk_size(record, offset)
    return sizes


class Capture(NamedTuple):
    """What one snapshot adds: the entries that changed and the blobs they need."""

    entries: dict[str, VarEntry]  # every variable, changed or not
    changed: list[str]
    removed: list[str]
    blobs: dict[str, memoryview | bytes]  # store key -> data, only what is not stored yet
    reuse: dict[str, int]  # store key -> size, stored by an earlier snapshot


class Capturer:
    """Keeps the last snapshot's view of the namespace to compute the next delta."""

    def __init__(self) -> None:
        self.entries: dict[str, VarEntry] = {}
        self._ids: dict[str, int] = {}
        self._namespace_id: int | None = None
        self._roots: dict[int, tuple[str, ...]] = {}
        self._unkept: dict[str, str] = {}  # name -> a view relation no snapshot keeps
        self._group_data = b""
        # a cycle -> its members' own fingerprints, its entries and pickle, as stored
        self._groups: dict[tuple[str, ...], tuple[tuple[str, ...], dict[str, VarEntry], bytes]]
        self._groups = {}
        self._variables: Mapping[str, Any] = {}
        self._namespace: dict[str, Any] = {}
        # name -> (pickle fingerprint, how pickling changes it, content fingerprint):
        # a value checked once in a state is not loaded again while it keeps it
        self._checked: dict[str, tuple[str, str, str]] = {}
        self.known_blobs: set[str] = set()  # store keys committed by earlier snapshots

    def capture(
        self,
        variables: dict[str, Any],
        made_by: Mapping[str, str],
        namespace: dict[str, Any] | None = None,
        replayable: Container[str] = (),
    ) -> Capture:
        """The entries of ``variables``; ``made_by``: name -> the cell that bound it;
        ``namespace``: the one the notebook's functions see (bound to it, not copied);
        ``replayable``: the cells that can be replayed, by key."""
        self._namespace = {} if namespace is None else namespace
        self._namespace_id = None if namespace is None else id(namespace)
        self._variables = variables
        named = self._named(variables)
        self._roots, self._unkept = array_roots(variables), unkept_views(variables)
        buffer_data: dict[str, memoryview] = {}
        pickles: dict[str, bytes] = {}
        entries: dict[str, VarEntry] = {}
        changed = set()
        keep_alive: list[Any] = []
        for name, value in variables.items():
            previous = self.entries.get(name)
            if previous is not None and self._same_immutable(name, value):
                entries[name] = previous
                continue
            entry, data = self._entry(name, value, named, buffer_data, keep_alive)
            entry = entry._replace(cell=made_by.get(name, ""))
            if entry.warning and entry.cell in replayable and name not in self._unkept:
                entry = self._replayed_instead(entry, value)
            if previous is not None and previous == entry:
                entries[name] = previous
                continue
            entries[name] = entry
            changed.add(name)
            if data is not None and entry.pickle_digest is not None:
                pickles[pickle_key(entry.pickle_digest)] = data
        for group in cycles({n: e.refs for n, e in entries.items() if e.how == "pickle"}):
            # each member's own pickle fingerprints the group: unchanged, not pickled again
            key = tuple(entries[m].fingerprint for m in group)
            cached = self._groups.get(group)
            if cached is not None and cached[0] == key:
                entries.update(cached[1])
                self._group_data = cached[2]
            else:
                try:
                    self._store_together(group, variables, named, entries, buffer_data, keep_alive)
                except Exception:  # apart, as before: the restore reports the cycle
                    continue
                together = {m: entries[m] for m in group}
                self._groups[group] = (key, together, self._group_data)
            for member in group:
                previous = self.entries.get(member)
                entry = entries[member]._replace(cell=made_by.get(member, ""))
                if previous == entry:
                    entries[member] = previous
                    changed.discard(member)
                else:
                    entries[member] = entry
                    changed.add(member)
            pickles[pickle_key(entries[group[0]].pickle_digest or "")] = self._group_data
        removed = sorted(set(self.entries) - set(variables))
        fresh: dict[str, bytes | memoryview] = {
            **pickles,
            **{buffer_key(d): v for d, v in buffer_data.items()},
        }
        needed = blob_sizes(entries)
        blobs = {k: v for k, v in fresh.items() if k in needed and k not in self.known_blobs}
        reuse = {k: size for k, size in needed.items() if k not in blobs}
        self.entries = entries
        self._ids = {name: id(value) for name, value in variables.items()}
        self._checked = {n: c for n, c in self._checked.items() if n in variables}
        self._groups = {g: c for g, c in self._groups.items() if set(g) <= set(variables)}
        return Capture(entries, sorted(changed), removed, blobs, reuse)

    def _store_together(
        self,
        group: tuple[str, ...],
        variables: dict[str, Any],
        named: dict[int, str],
        entries: dict[str, VarEntry],
        buffer_data: dict[str, memoryview],
        keep_alive: list[Any],
    ) -> None:
        """Pickle the variables of a cycle as one tuple: references between them go
        through pickle's memo, references to others by name (see ``_cycles``)."""
        from ft_notebook.session._pickler import pickle_variable

        inside = {id(variables[m]) for m in group}
        outside = {i: n for i, n in named.items() if i not in inside}
        label = "+".join(group)
        values = tuple(variables[m] for m in group)
        pickled = pickle_variable(
            label, values, outside, buffer_data, namespace_id=self._namespace_id, roots=self._roots
        )
        keep_alive.append(pickled.keep_alive)
        self._group_data = pickled.data
        digest = digest_of(pickled.data)
        nbytes = len(pickled.data) + sum(b.nbytes for b in pickled.buffers.values())
        for i, member in enumerate(group):
            entries[member] = entries[member]._replace(
                fingerprint=f"{pickled.fingerprint}#{i}",
                pickle_digest=digest,
                pickle_size=len(pickled.data),
                nbytes=nbytes if i == 0 else 0,  # the size of a snapshot counts it once
                buffers=pickled.buffers,
                refs=tuple(sorted(set(pickled.refs) | (set(group) - {member}))),
                out_of_band=tuple(pickled.out_of_band),
                group=group,
            )

    def diff(self, variables: dict[str, Any]) -> tuple[list[str], list[str]]:
        """Names changed (or deleted) since the last capture, and names added; no state kept."""
        named = self._named(variables)
        self._roots, self._unkept = array_roots(variables), unkept_views(variables)
        self._variables = variables
        changed, added = [], []
        for name, value in variables.items():
            previous = self.entries.get(name)
            if previous is None:
                added.append(name)
            elif not self._same_immutable(name, value):
                entry, _ = self._entry(name, value, named, {}, [])
                if entry.fingerprint != previous.fingerprint:
                    changed.append(name)
        changed += [n for n in self.entries if n not in variables]
        return sorted(self._with_dependents(set(changed), variables)), sorted(added)

    def _with_dependents(self, changed: set[str], variables: dict[str, Any]) -> set[str]:
        """``changed`` and every variable that refers to one of them (an alias, a view,
        a list holding it): putting back only the first would leave those pointing
        at the object that is being replaced."""
        grown = True
        while grown:
            grown = False
            for name, entry in self.entries.items():
                if name in variables and name not in changed and changed & set(entry.refs):
                    changed.add(name)
                    grown = True
        return changed

    def reset(self) -> None:
        """Forget everything: the next capture stores every variable in full."""
        self.entries, self._ids = {}, {}
        self.known_blobs = set()

    def committed(self, capture: Capture) -> None:
        """``capture`` is durable: later snapshots may reuse the blobs it names. Only
        those: blobs of older snapshots may be collected once they are pruned."""
        self.known_blobs = set(blob_sizes(capture.entries))

    def _named(self, variables: dict[str, Any]) -> dict[int, str]:
        """id -> variable name, for references between variables. Immutable scalars are
        left out: Python shares them (small ints, interned strings, True), so a `2` in a
        list is the very object `x = 2` names, and identity means nothing for them."""
        named: dict[int, str] = {}
        for name in sorted(variables, key=lambda n: (n not in self.entries, n)):
            value = variables[name]
            if not isinstance(value, _IMMUTABLE):
                named.setdefault(id(value), name)  # an alias points at the older name
        return named

    def _same_immutable(self, name: str, value: Any) -> bool:
        return isinstance(value, _IMMUTABLE) and self._ids.get(name) == id(value)

    def _entry(
        self,
        name: str,
        value: Any,
        named: dict[int, str],
        buffer_data: dict[str, memoryview],
        keep_alive: list[Any],
    ) -> tuple[VarEntry, bytes | None]:
        # cloudpickle and numpy load with the first snapshot, not with %load_ext: a
        # kernel that only restores never needs them for its own sake
        from ft_notebook.session._connections import connection_reason
        from ft_notebook.session._pickler import content_fingerprint, pickle_variable

        type_name = f"{type(value).__module__}.{type(value).__qualname__}"
        connection = connection_reason(value)
        if connection is not None:  # said once, as what it is: see _connections
            return VarEntry(name, "lost", type_name, f"{id(value):x}", "", reason=connection), None
        try:
            pickled = pickle_variable(
                name,
                value,
                named,
                buffer_data,
                namespace_id=self._namespace_id,
                roots=self._roots,
            )
        except Exception as e:  # pickle raises many types for objects it cannot carry
            why = f"{type(e).__name__}: {e}"[:300]
            try:
                fingerprint = content_fingerprint(value, self._namespace_id)
            except Exception as f:  # a replay of it could not be checked: never trusted
                reason = f"it cannot be pickled ({why}) nor fingerprinted ({type(f).__name__}: {f})"
                return VarEntry(
                    name, "lost", type_name, f"{id(value):x}", "", reason=reason[:600]
                ), None
            return VarEntry(name, "replay", type_name, fingerprint, "", reason=why), None
        keep_alive.append(pickled.keep_alive)
        warning = self._unkept.get(name) or self._round_trip(name, value, pickled, buffer_data)
        nbytes = len(pickled.data) + sum(b.nbytes for b in pickled.buffers.values())
        entry = VarEntry(
            name,
            "pickle",
            type_name,
            pickled.fingerprint,
            "",
            pickle_digest=digest_of(pickled.data),
            pickle_size=len(pickled.data),
            nbytes=nbytes,
            buffers=pickled.buffers,
            refs=tuple(sorted(pickled.refs)),
            out_of_band=tuple(pickled.out_of_band),
            warning=warning,
        )
        return entry, pickled.data

    def _round_trip(
        self, name: str, value: Any, pickled: Any, buffer_data: dict[str, memoryview]
    ) -> str:
        """How ``value`` differs from its unpickled copy ("" if it does not; see
        ``_roundtrip``), checked once per state of the value."""
        from ft_notebook.session import _roundtrip

        checked = self._checked.get(name)
        if checked is not None and checked[0] == pickled.fingerprint:
            return checked[1]  # unchanged since it was checked: no walk, no load
        if (
            _roundtrip.is_plain(value)
            or _roundtrip.opens_handles(pickled.data)
            or sum(b.nbytes for b in pickled.buffers.values()) > _roundtrip.LARGEST
        ):
            self._checked[name] = (pickled.fingerprint, "", "")
            return ""
        variables = self._variables
        try:
            copy = _roundtrip.unpickled_copy(
                pickled.data,
                pickled.buffers,
                tuple(pickled.out_of_band),
                buffer_data,
                variables.__getitem__,
                self._namespace,
            )
            warning = _roundtrip.difference(value, copy)
        except Exception as e:  # a restore would fail the same way: say so now
            warning = f"its pickle does not load: {type(e).__name__}: {e}"[:300]
        self._checked[name] = (pickled.fingerprint, warning, "")
        return warning

    def _replayed_instead(self, entry: VarEntry, value: Any) -> VarEntry:
        """A value that pickling changes: its content fingerprint, so that a restore
        may replay the cell that made it instead, and check the replay."""
        from ft_notebook.session._pickler import content_fingerprint

        pickled_fp, warning, content = self._checked[entry.name]
        if not content:
            try:
                content = content_fingerprint(value, self._namespace_id)
            except Exception:  # no way to check a replay of it: the pickle it is
                return entry
            self._checked[entry.name] = (pickled_fp, warning, content)
        return entry._replace(content=content)
