"""From a URL to a :class:`~._location.Location`: local folders get the fsync-and-rename
backend, every other fsspec protocol the put-based one."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ft_notebook.exceptions import StoreError
from ft_notebook.store._location import Location


def open_location(url: str | os.PathLike[str], trust: bool, options: Mapping[str, Any]) -> Location:
    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    from ft_notebook.store._fsspec import FsspecLocation
    from ft_notebook.store._local import LocalLocation

    if not isinstance(url, (str, os.PathLike)):
        raise StoreError(f"A store location is a path or URL string, got {url!r}.")
    text = os.fspath(url)
    try:
        fs, path = fsspec.core.url_to_fs(text, **options)
    except (ImportError, ValueError) as e:
        raise StoreError(
            f"Cannot open the checkpoint location {text!r}: {e}. Use a folder, file://, "
            f"memory://, or install the fsspec backend for this protocol."
        ) from e
    try:
        if isinstance(fs, LocalFileSystem):
            return LocalLocation(Path(path))
        return FsspecLocation(fs, path, text, trust=trust)
    except OSError as e:
        raise StoreError(
            f"Cannot open the checkpoint location {text!r}: creating {e.filename or path} "
            f"failed with [Errno {e.errno}] {e.strerror}. Choose a location you can write "
            f"to, or create it first."
        ) from e
