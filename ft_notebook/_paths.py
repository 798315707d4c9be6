"""The user's private data folder, and the one gate names pass to become paths.

The machine is shared: everything ft_notebook keeps (journals, the cluster registry,
certificates, snapshots) lives in a folder only its owner can enter, and a name a
user typed (a run, a snapshot, a topic) becomes part of a path only through
:func:`checked_name`.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from ft_notebook.exceptions import StoreUnsafe, UnsafeName

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def checked_name(name: object, what: str = "name") -> str:
    """Return ``name`` if it is safe as a single path component, else raise UnsafeName."""
    if isinstance(name, str) and _NAME.fullmatch(name) and ".." not in name:
        return name
    raise UnsafeName(
        f"The {what} {name!r} cannot be used: it must be 1 to 128 characters of "
        f"letters, digits, '.', '_' or '-', start with a letter or digit and hold "
        f"no '..'. Choose another {what}."
    )


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) as a folder only the current user can use.

    An existing folder must belong to the current user and must not be writable by
    group or others; otherwise another user could plant files we later load.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise StoreUnsafe(
            f"The folder {path} belongs to uid {info.st_uid}, not to you "
            f"(uid {os.getuid()}). Point ft-notebook.data-dir at a folder of your own."
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StoreUnsafe(
            f"The folder {path} has mode {stat.filemode(info.st_mode)}: other users "
            f"can write to it. Run `chmod go-w {path}` or choose another folder."
        )
    return path


def data_dir() -> Path:
    """The configured private data folder, created on first use."""
    from ft_notebook.config import data_dir_setting

    return private_dir(data_dir_setting())
