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

import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from ft_notebook.session._objects import BufferRecord, chunk_size, digest_of

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
        self.known_blobs: set[str] = set()  # store keys committed by earlier snapshots

    def capture(self, variables: dict[str, Any], made_by: Mapping[str, str]) -> Capture:
        """The entries of ``variables``; ``made_by``: name -> the cell that bound it."""
        named = self._named(variables)
        buffer_data: dict[str, memoryview] = {}
        pickles: dict[str, bytes] = {}
        entries: dict[str, VarEntry] = {}
        changed = []
        keep_alive: list[Any] = []
        for name, value in variables.items():
            previous = self.entries.get(name)
            if previous is not None and self._same_immutable(name, value):
                entries[name] = previous
                continue
            entry, data = self._entry(name, value, named, buffer_data, keep_alive)
            entry = entry._replace(cell=made_by.get(name, ""))
            if previous is not None and previous == entry:
                entries[name] = previous
                continue
            entries[name] = entry
            changed.append(name)
            if data is not None and entry.pickle_digest is not None:
                pickles[pickle_key(entry.pickle_digest)] = data
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
        return Capture(entries, sorted(changed), removed, blobs, reuse)

    def diff(self, variables: dict[str, Any]) -> tuple[list[str], list[str]]:
        """Names changed (or deleted) since the last capture, and names added; no state kept."""
        named = self._named(variables)
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
        from ft_notebook.session._pickler import content_fingerprint, pickle_variable

        type_name = f"{type(value).__module__}.{type(value).__qualname__}"
        try:
            pickled = pickle_variable(name, value, named, buffer_data)
        except Exception as e:  # pickle raises many types for objects it cannot carry
            why = f"{type(e).__name__}: {e}"[:300]
            try:
                fingerprint = content_fingerprint(value)
            except Exception as f:  # a replay of it could not be checked: never trusted
                reason = f"it cannot be pickled ({why}) nor fingerprinted ({type(f).__name__}: {f})"
                return VarEntry(
                    name, "lost", type_name, f"{id(value):x}", "", reason=reason[:600]
                ), None
            return VarEntry(name, "replay", type_name, fingerprint, "", reason=why), None
        keep_alive.append(pickled.keep_alive)
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
        )
        return entry, pickled.data


_PICKLE_SENSITIVE = ("numpy", "torch", "pandas", "cloudpickle")


def versions(modules: Iterable[str] | None = None) -> dict[str, str]:
    """Versions a snapshot's pickles depend on: Python, and libraries in use.

    Without ``modules``, the libraries this process has imported; read from the
    installed metadata, so a restore can compare before importing anything.
    """
    found = {"python": f"{sys.version_info.major}.{sys.version_info.minor}"}
    names = [m for m in _PICKLE_SENSITIVE if m in sys.modules] if modules is None else modules
    for module in names:
        if module != "python":
            found[module] = installed_version(module)
    return found


def installed_version(module: str) -> str:
    """``importlib.metadata.version(module)``, or "not installed".

    Its first call costs a restore 5 ms (it imports the email parser and indexes every
    path entry); the ``<name>-<version>.dist-info`` folder beside the package, where
    pip puts it, is read first. A unit test holds the two equal.
    """
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin and spec.submodule_search_locations:
        site = os.path.dirname(os.path.dirname(spec.origin))
        prefix = module.replace("-", "_").lower() + "-"
        try:
            folders = [n for n in os.listdir(site) if n.lower().startswith(prefix)]
        except OSError:
            folders = []
        infos = [n for n in folders if n.endswith(".dist-info")]
        if len(infos) == 1:
            version = _metadata_version(os.path.join(site, infos[0], "METADATA"))
            if version is not None:
                return version
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _metadata_version(path: str) -> str | None:
    """The ``Version:`` header of a METADATA file (the headers end at a blank line)."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
