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
    if not isinstance(url, (str, os.PathLike)):
        raise StoreError(f"A store location is a path or URL string, got {url!r}.")
    text = os.fspath(url)
    if isinstance(url, Path):
        # a Path is a local folder (it cannot spell "proto://"): no need to import
        # fsspec (~15 ms, a good part of what restoring a small notebook takes)
        return _local(url, text, trust)

    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    from ft_notebook.store._fsspec import FsspecLocation

    try:
        fs, path = fsspec.core.url_to_fs(text, **options)
    except (ImportError, ValueError) as e:
        raise StoreError(
            f"Cannot open the checkpoint location {text!r}: {e}. Use a folder, file://, "
            f"memory://, or install the fsspec backend for this protocol."
        ) from e
    if isinstance(fs, LocalFileSystem):
        return _local(Path(path), text, trust)
    try:
        return FsspecLocation(fs, path, text, trust=trust)
    except OSError as e:
        raise _cannot_create(text, path, e) from e


def _local(path: Path, text: str, trust: bool) -> Location:
    from ft_notebook.store._local import LocalLocation

    try:
        return LocalLocation(path, trust=trust)
    except OSError as e:
        raise _cannot_create(text, str(path), e) from e


def _cannot_create(text: str, path: str, e: OSError) -> StoreError:
    return StoreError(
        f"Cannot open the checkpoint location {text!r}: creating {e.filename or path} "
        f"failed with [Errno {e.errno}] {e.strerror}. Choose a location you can write "
        f"to, or create it first."
    )
