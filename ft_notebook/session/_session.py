"""One notebook's snapshots: take them after cells, list them, restore them.

A snapshot is a manifest (variables, how each is kept, the cells needed for replay,
library versions) committed last, after every blob it names, through the
:class:`SnapshotStorage`; an interrupted snapshot therefore leaves the previous one
whole. Blobs are content-addressed, so data that did not change is never written
twice, and only the newest state is kept unless a snapshot is named.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from ft_notebook._paths import checked_name
from ft_notebook.exceptions import SnapshotError
from ft_notebook.session._capture import Capturer, VarEntry, versions
from ft_notebook.session._namespace import capture_rng, imported_modules, user_variables
from ft_notebook.session._objects import BufferRecord
from ft_notebook.session._restore import RestoreReport, rebuild

FORMAT = 1


class SnapshotStorage(Protocol):
    """Where snapshots live: content-addressed blobs and atomically committed manifests."""

    def has_blob(self, digest: str) -> bool: ...
    def put_blob(self, digest: str, data: bytes | memoryview) -> int: ...
    def get_blob(self, digest: str) -> bytes: ...
    def commit(self, name: str, manifest: Mapping[str, Any]) -> None: ...
    def manifest(self, name: str) -> dict[str, Any]: ...
    def names(self) -> list[str]: ...
    def retain(self, keep: Iterable[str]) -> None: ...


@dataclass(frozen=True)
class SnapshotInfo:
    name: str
    cell: int
    time: float
    variables: int
    changed: tuple[str, ...]
    bytes_written: int
    size: int
    replay: tuple[str, ...]


class NotebookSession:
    """The snapshots of one notebook's kernel namespace."""

    LATEST = "latest"

    def __init__(self, storage: SnapshotStorage) -> None:
        self.storage = storage
        self._capturer = Capturer()
        self._cells: dict[int, dict[str, Any]] = {}
        self._pinned: set[str] = set()

    def before_cell(self, count: int, code: str) -> None:
        """Record a cell's code and the random state it starts from, for replay."""
        self._cells[count] = {"code": code, "rng": capture_rng()}

    def snapshot(
        self,
        namespace: Mapping[str, Any],
        cell: int,
        *,
        name: str | None = None,
        names: Iterable[str] | None = None,
        hidden: Mapping[str, Any] | None = None,
    ) -> SnapshotInfo:
        """Commit a snapshot of ``namespace`` (or of ``names`` in it) after cell ``cell``."""
        label = self.LATEST if name is None else checked_name(name, "snapshot name")
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
            if label == self.LATEST:
                raise SnapshotError(
                    "A snapshot of some variables needs a name: `%ft save NAME --vars ...`."
                )
            variables = {n: variables[n] for n in wanted}
            capturer = Capturer()
            capturer.known_blobs = self._capturer.known_blobs
        capture = capturer.capture(variables, cell)
        written = 0
        for digest, data in capture.blobs.items():
            if not self.storage.has_blob(digest):
                written += self.storage.put_blob(digest, data)
        needed = {e.cell for e in capture.entries.values() if e.how != "pickle"}
        now = time.time()
        manifest = {
            "format": FORMAT,
            "name": label,
            "cell": cell,
            "time": now,
            "versions": versions(),
            "variables": {n: _entry_to_json(e) for n, e in capture.entries.items()},
            "modules": imported_modules(namespace),
            "cells": {str(c): self._cells[c] for c in sorted(needed) if c in self._cells},
        }
        self.storage.commit(label, manifest)
        capturer.committed(capture)
        if name is not None:
            self._pinned.add(label)
        self.storage.retain({self.LATEST, *self._pinned})
        size = sum(e.nbytes for e in capture.entries.values())
        return SnapshotInfo(
            label,
            cell,
            now,
            len(capture.entries),
            tuple(capture.changed),
            written,
            size,
            tuple(n for n, e in capture.entries.items() if e.how != "pickle"),
        )

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
    ) -> RestoreReport:
        """Put the snapshot's variables (or ``names`` of them) back into ``namespace``."""
        label = checked_name(name, "snapshot name")
        manifest = self._manifest(label)
        _check_versions(manifest)
        entries = {n: _entry_from_json(n, raw) for n, raw in manifest["variables"].items()}
        wanted = list(entries) if names is None else list(names)
        unknown = [n for n in wanted if n not in entries]
        if unknown:
            raise SnapshotError(
                f"Snapshot {label!r} holds no variables {unknown}; it holds {sorted(entries)}. "
                f"Run `%ft list` to see the snapshots and their variables."
            )
        cells = {int(c): v for c, v in manifest.get("cells", {}).items()}
        modules, missing = _import_modules(manifest.get("modules", {}))
        base = {**namespace, **modules}
        values, report = rebuild(entries, cells, self.storage.get_blob, base, wanted)
        report.lost.update(missing)
        if names is None:
            values = {**modules, **values}
        namespace.update(values)  # only now: a failure above left the namespace alone
        return report

    def list(self) -> list[dict[str, Any]]:
        rows = []
        for label in self.storage.names():
            m = self._manifest(label)
            variables = m["variables"]
            rows.append(
                {
                    "name": label,
                    "time": m["time"],
                    "cell": m["cell"],
                    "size": sum(v["nbytes"] for v in variables.values()),
                    "variables": sorted(variables),
                }
            )
        return sorted(rows, key=lambda r: r["time"])

    def _manifest(self, label: str) -> dict[str, Any]:
        if label not in self.storage.names():
            known = ", ".join(self.storage.names()) or "none yet"
            raise SnapshotError(
                f"There is no snapshot {label!r} (snapshots: {known}). Take one with "
                f"`%ft save` or turn on `%ft auto on`."
            )
        return self.storage.manifest(label)


def _import_modules(modules: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    found, missing = {}, {}
    for name, module in modules.items():
        try:
            found[name] = importlib.import_module(module)
        except Exception as e:  # any import-time failure: the module is what is lost
            missing[name] = f"import {module} failed: {type(e).__name__}: {e}"
    return found, missing


def _check_versions(manifest: Mapping[str, Any]) -> None:
    saved = manifest.get("versions", {})
    now = versions(saved)
    wrong = {k: (v, now.get(k)) for k, v in saved.items() if now.get(k) != v}
    if manifest.get("format") != FORMAT or wrong:
        detail = ", ".join(f"{k} {old} then, {new} now" for k, (old, new) in wrong.items())
        raise SnapshotError(
            f"Snapshot {manifest.get('name')!r} was taken with other versions "
            f"({detail or 'format'}); loading its pickles here could go wrong silently, so "
            f"nothing was restored. Restore it in an environment with the versions it names."
        )


def _entry_to_json(entry: VarEntry) -> dict[str, Any]:
    raw = asdict(entry)
    raw["buffers"] = {k: asdict(b) for k, b in entry.buffers.items()}
    return raw


def _entry_from_json(name: str, raw: Mapping[str, Any]) -> VarEntry:
    buffers = {
        k: BufferRecord(**{**b, "shape": tuple(b["shape"])})
        for k, b in raw.get("buffers", {}).items()
    }
    fields = {k: v for k, v in raw.items() if k not in ("buffers", "name")}
    return VarEntry(name=name, buffers=buffers, **fields)
