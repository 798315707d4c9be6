"""Objects pickle refuses, kept by what makes them what they are.

A lock, an open file and a SQLite connection are handles, not data: pickle refuses
them, and a replay of the cell that made them reopens them where the cell did, not
where the notebook had got to. Each is reduced to the state that defines it and
rebuilt from that on restore:

- a ``threading.Lock`` by whether it is held (it comes back held by the kernel);
- an open file by its path, mode, position and encoding. A file opened for writing
  is flushed first (the snapshot holds what is on disk) and reopened without
  truncating it; one whose path is gone, or that is not a plain file on disk (a pipe,
  a socket, a descriptor number), is not reduced: it is left to replay;
- a SQLite connection: an in-memory database by its content (``serialize()``), a file
  database by its path (its content is the file).

The rebuilders are plain functions of this module, which a snapshot names by
reference, so the read side needs only the standard library.
"""

from __future__ import annotations

import io
import os
import pickle
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

_LOCK = type(threading.Lock())
_RLOCK = type(threading.RLock())
_FILE_TYPES = (io.TextIOWrapper, io.BufferedReader, io.BufferedWriter, io.BufferedRandom, io.FileIO)
# a mode that created or truncated the file, reopened so that it does neither again
_REOPEN = {"w": "r+", "x": "r+", "w+": "r+", "x+": "r+"}

Reduced = tuple[Callable[..., Any], tuple[Any, ...]]

#: names of the rebuilders that open something: a pickle naming one is not loaded
#: again to check its round trip (that would open the file or database once more)
OPENERS = (b"reopen_file", b"reconnect_sqlite", b"sqlite_from_bytes")


def reduce(obj: Any) -> Reduced | None:
    """How to rebuild ``obj``, or None when it is not one of ours (pickle decides)."""
    kind = type(obj)
    if kind is _LOCK:
        return new_lock, (obj.locked(),)
    if kind is _RLOCK:
        return new_rlock, (_rlock_held(obj),)
    if kind is sqlite3.Connection:
        return _reduce_sqlite(obj)
    if kind in _FILE_TYPES:
        return _reduce_file(obj)
    return None


def new_lock(locked: bool) -> Any:
    lock = threading.Lock()
    if locked:
        lock.acquire()
    return lock


def new_rlock(held: int) -> Any:
    lock = threading.RLock()
    for _ in range(held):
        lock.acquire()
    return lock


def _rlock_held(lock: Any) -> int:
    # "<locked _thread.RLock object owner=... count=2 at ...>": the only public view of it
    text = repr(lock)
    if "count=" not in text or not lock._is_owned():
        return 0
    return int(text.split("count=", 1)[1].split()[0])


def _reduce_sqlite(conn: sqlite3.Connection) -> Reduced:
    try:
        databases = conn.execute("PRAGMA database_list").fetchall()
    except sqlite3.Error as e:  # closed, or busy in another thread
        raise pickle.PicklingError(f"a SQLite connection that cannot be read ({e})") from e
    if len(databases) != 1:
        raise pickle.PicklingError("a SQLite connection with attached databases is replayed")
    path = databases[0][2]
    if path:
        return reconnect_sqlite, (path,)
    return sqlite_from_bytes, (conn.serialize(),)


def reconnect_sqlite(path: str) -> sqlite3.Connection:
    return sqlite3.connect(path)


def sqlite_from_bytes(data: bytes) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(data)
    return conn


def _reduce_file(f: Any) -> Reduced:
    name = getattr(f, "name", None)
    if not isinstance(name, str) or f.closed:
        raise pickle.PicklingError(f"a file that is closed or has no path ({name!r})")
    path = os.path.abspath(name)
    if not os.path.isfile(path):
        raise pickle.PicklingError(f"an open file that is not a plain file on disk ({path})")
    if f.writable():
        f.flush()
    mode = f.mode
    text = isinstance(f, io.TextIOWrapper)
    encoding = (f.encoding, f.errors) if text else None
    return reopen_file, (path, name, mode, f.tell(), text, encoding)


def reopen_file(
    path: str, name: str, mode: str, position: int, text: bool, encoding: tuple[str, str] | None
) -> Any:
    """The file opened again where it was, under the name it was opened by; raises if
    it is gone (the variable is then reported lost)."""
    plain = mode.replace("b", "").replace("t", "")
    binary = "" if text else "b"
    again = _REOPEN.get(plain, plain) + binary
    f: Any
    if text and encoding is not None:
        f = open(path, again, encoding=encoding[0], errors=encoding[1])  # noqa: SIM115
        f.mode = mode  # what the notebook opened it as; open() keeps it on text files
    else:
        f = open(path, again)  # noqa: SIM115
    raw = f.buffer.raw if text else getattr(f, "raw", f)
    raw.name = name
    if "a" not in plain:
        f.seek(position)
    return f
