"""Renamed notebooks keep their snapshots: the server's half.

Jupyter's contents service emits an event for each rename made through its API (the
file browser, "Rename Notebook", a moved folder). For each notebook whose old key
holds snapshots (or was itself renamed from one that does), the new key is recorded
as a rename of the old one (see :mod:`ft_notebook._renames`), so that a kernel started
under the new name restores them and the panel lists them.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from jupyter_server.utils import ApiPath, to_os_path

from ft_notebook import _renames
from ft_notebook._notebook_key import notebook_key

CONTENTS_EVENTS = "https://events.jupyter.org/jupyter_server/contents_service/v1"
#: Files looked at under a renamed folder, at most (a huge tree is not walked).
MOST_FILES = 5000


def kernel_file_path(kernel_manager: Any, api_path: str) -> str:
    """What a kernel started for ``api_path`` gets as ``JPY_SESSION_NAME``: the working
    directory the server gives it, joined with the file's name. ValueError for a path
    that does not stay inside the server's root."""
    parts = api_path.strip("/").split("/")
    if not api_path.strip("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(
            f"The notebook path {api_path!r} is not a path inside the server's root, "
            f"e.g. 'folder/analysis.ipynb'."
        )
    cwd: str = kernel_manager.cwd_for_path(api_path)
    return os.path.join(cwd, parts[-1])


def listener(serverapp: Any) -> Any:
    """The contents-service listener to register with the server's event logger."""

    async def on_contents_event(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        source, path = data.get("source_path"), data.get("path")
        if data.get("action") != "rename" or not source or not path:
            return
        try:
            followed = await asyncio.to_thread(
                follow_rename, serverapp.kernel_manager, str(source), str(path)
            )
        except Exception as e:  # a rename must never fail because of us
            serverapp.log.warning("ft_notebook: could not follow the rename of %s: %s", source, e)
            return
        for old, new in followed:
            serverapp.log.info("ft_notebook: snapshots of %s now follow it to %s", old, new)

    return on_contents_event


def follow_rename(kernel_manager: Any, old_api: str, new_api: str) -> list[tuple[str, str]]:
    """Record the renames of the notebooks ``old_api`` -> ``new_api`` moved (one file,
    or every file under a folder) whose old key has snapshots; (old, new) keys."""
    from ft_notebook._paths import data_dir
    from ft_notebook.config import data_dir_setting
    from ft_notebook.store import CheckpointStore

    if not (data_dir_setting() / "snapshots").is_dir():
        return []  # no snapshot taken yet: nothing to follow, and no folder made for it
    root = kernel_manager.root_dir
    new_os = to_os_path(ApiPath(new_api), root)
    if os.path.isdir(new_os):  # a folder: the parent of the old one still holds it
        old_os = to_os_path(ApiPath(old_api), root)
        moved = [(os.path.join(old_os, rel), os.path.join(new_os, rel)) for rel in _files(new_os)]
    else:  # a file: its old folder is still there (else it is moved as a folder)
        old, new = (kernel_file_path(kernel_manager, p) for p in (old_api, new_api))
        moved = [(old, new)]
    folder = data_dir()
    with CheckpointStore(folder / "snapshots", keep=None, publish_events=False) as store:
        have = set(store.runs())
    keys = [(notebook_key(old), notebook_key(new)) for old, new in moved]
    # with snapshots, or renamed from a name that may have them (checked under the lock)
    return _renames.record_moves(folder, keys, having=have)


def _files(top: str) -> list[str]:
    """Paths of the files under ``top``, relative to it (hidden folders skipped)."""
    out: list[str] = []
    for here, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        out += [os.path.relpath(os.path.join(here, f), top) for f in files]
        if len(out) >= MOST_FILES:
            return out[:MOST_FILES]
    return out
