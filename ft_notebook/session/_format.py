"""A snapshot's manifest: the format its variables are described in, and the checks
made before any of its pickles is loaded.

The manifest is JSON (the store's tagged values); each variable is a
:class:`VarEntry` with its :class:`BufferRecord` s. Format 2: cells keyed by kernel
and execution count, protocol 5 buffers out of band, replays checked against a
content fingerprint. Format 3: the notebook's functions bound to the namespace by
reference, views placed in their memory owner, cycles of variables pickled together,
and the process's random states. A snapshot in another format, or taken with other versions of
the libraries its pickles depend on, is refused before anything is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ft_notebook.exceptions import SnapshotError
from ft_notebook.session._capture import VarEntry, versions
from ft_notebook.session._objects import BufferRecord

FORMAT = 3


def check_versions(manifest: Mapping[str, Any]) -> None:
    saved = manifest.get("versions", {})
    now = versions(saved)
    wrong = {k: (v, now.get(k)) for k, v in saved.items() if now.get(k) != v}
    if manifest.get("format") != FORMAT:
        raise SnapshotError(
            f"Snapshot {manifest.get('name')!r} is in format {manifest.get('format')} of "
            f"another ft_notebook version; this one reads format {FORMAT}, so nothing was "
            f"restored. Restore it with the ft_notebook that took it, or take a new one."
        )
    if wrong:
        detail = ", ".join(f"{k} {old} then, {new} now" for k, (old, new) in wrong.items())
        raise SnapshotError(
            f"Snapshot {manifest.get('name')!r} was taken with other versions "
            f"({detail}); loading its pickles here could go wrong silently, so "
            f"nothing was restored. Restore it in an environment with the versions it names."
        )


def entry_to_json(entry: VarEntry) -> dict[str, Any]:
    raw = entry._asdict()
    raw["buffers"] = {k: b._asdict() for k, b in entry.buffers.items()}
    return raw


def entry_from_json(name: str, raw: Mapping[str, Any]) -> VarEntry:
    buffers = {
        k: BufferRecord(**{**b, "shape": tuple(b["shape"]), "chunks": tuple(b["chunks"])})
        for k, b in raw.get("buffers", {}).items()
    }
    tuples = ("refs", "out_of_band", "group")
    fields = {k: v for k, v in raw.items() if k not in ("buffers", "name", *tuples)}
    return VarEntry(
        name=name,
        buffers=buffers,
        refs=tuple(raw.get("refs", ())),
        out_of_band=tuple(raw.get("out_of_band", ())),
        group=tuple(raw.get("group", ())),
        **fields,
    )
