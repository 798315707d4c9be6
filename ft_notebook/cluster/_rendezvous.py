"""The rendezvous store the control plane hosts: keys in the scheduler, reached over Dask.

Workers meet through it when they form a process group (addresses, ranks, step
numbers, flags). It lives in the scheduler process, which outlives every worker, and
collectives keep working if it goes. It opens no port of its own: ranks reach it
through the scheduler handler :data:`HANDLER` on the cluster's own connections, which
are TLS with the cluster's certificate for the clusters ft_notebook starts, so only
the cluster's members can read, write or wait on a key. (A raw ``TCPStore`` has no
authentication: any local user could read, write and delete its keys, join a group
forming, and fill the scheduler's memory; issue 36 measured 1 GB written in 1.2 s.)

Memory is bounded: at most :data:`MAX_BYTES` of keys and values and :data:`MAX_KEYS`
keys; a write past either is refused with a message that gives both numbers.
Waits are asyncio events with a deadline, so a waiter for a key that never comes
ends, and a closed store wakes every waiter. Values are bytes that consumers must
parse as data, never unpickle or execute.

The handler answers ``{"value": ...}`` or ``{"error": ..., "timeout": bool}`` instead of
raising, so a rank's expected timeout is not logged on the scheduler as a crash. The
rank-side client is :class:`ft_notebook.train.rank._store.ClusterStore`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

#: The scheduler handler the ranks' store calls.
HANDLER = "ft_rendezvous"
#: Keys and values held at most, in bytes (a group of W ranks writes about 200 W
#: bytes; retired generations' keys are forgotten by the coordinator).
MAX_BYTES = 16 * 2**20
#: Keys held at most.
MAX_KEYS = 65_536
#: The longest wait a client may ask for.
MAX_WAIT_S = 3600.0
#: At most this many sibling keys come back with a ``set`` (see :func:`_folder`).
MAX_SIBLINGS = 256


def _folder(key: str) -> str:
    """A key's folder: up to its last ``/`` (a group's prefix: its ranks' keys)."""
    return key.rpartition("/")[0]


class StoreFull(Exception):
    """A write would take the store past its bounds."""


class RendezvousStore:
    """A bounded key-value store with blocking waits, on the scheduler's event loop.

    Not thread-safe: every call comes from the event loop (the handler).
    """

    def __init__(self, max_bytes: int = MAX_BYTES, max_keys: int = MAX_KEYS) -> None:
        self.max_bytes, self.max_keys = max_bytes, max_keys
        self.data: dict[str, bytes] = {}
        #: key folder -> its keys, for what a ``set`` answers (the siblings)
        self.folders: dict[str, set[str]] = {}
        self.nbytes = 0
        self._changed = asyncio.Event()  # set (and replaced) on every write
        self.closed = False

    # ---- synchronous operations

    def set(self, key: str, value: bytes) -> None:
        old = self.data.get(key)
        grow = len(value) - (len(old) if old is not None else -len(key))
        if old is None and len(self.data) >= self.max_keys:
            raise StoreFull(
                f"The rendezvous store holds {len(self.data)} keys, its limit; key "
                f"{key[:80]!r} was refused. Retired groups' keys are forgotten when a "
                f"generation retires: restart the cluster (ft.down) if this persists."
            )
        if self.nbytes + grow > self.max_bytes:
            raise StoreFull(
                f"The rendezvous store holds {self.nbytes} bytes; {len(value)} more for "
                f"key {key[:80]!r} would pass its limit of {self.max_bytes} bytes. It "
                f"carries only small values (addresses, counters): restart the cluster "
                f"(ft.down) if this persists."
            )
        self.data[key] = value
        self.folders.setdefault(_folder(key), set()).add(key)
        self.nbytes += grow
        self._wake()

    def add(self, key: str, amount: int) -> int:
        current = self.data.get(key)
        value = (int(current) if current else 0) + amount
        self.set(key, str(value).encode())
        return value

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        """TCPStore's rule: a missing key counts as ``b""``; returns the value now held,
        or ``expected`` when the key is missing and was not set."""
        current = self.data.get(key)
        if (current is None and expected == b"") or current == expected:
            self.set(key, desired)
            return desired
        return expected if current is None else current

    def append(self, key: str, value: bytes) -> None:
        self.set(key, self.data.get(key, b"") + value)

    def delete(self, key: str) -> bool:
        old = self.data.pop(key, None)
        if old is None:
            return False
        folder = self.folders.get(_folder(key))
        if folder is not None:
            folder.discard(key)
            if not folder:
                del self.folders[_folder(key)]
        self.nbytes -= len(key) + len(old)
        return True

    def siblings(self, key: str) -> dict[str, bytes]:
        """The other keys in ``key``'s folder, with their values (at most
        :data:`MAX_SIBLINGS`)."""
        names = sorted(self.folders.get(_folder(key), ()))[:MAX_SIBLINGS]
        return {k: self.data[k] for k in names if k != key}

    def forget(self, prefix: str) -> int:
        """Delete every key under ``prefix`` (a group that will never meet again);
        returns how many."""
        gone = [k for k in self.data if k.startswith(prefix)]
        for key in gone:
            self.delete(key)
        return len(gone)

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    # ---- waits

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, keys: list[str], timeout_s: float) -> bool:
        """Wait until every key in ``keys`` exists; False after ``timeout_s``."""
        deadline = time.monotonic() + min(max(timeout_s, 0.0), MAX_WAIT_S)
        while not self.check(keys):
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return False
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), left)
            except asyncio.TimeoutError:
                return False
        return True

    def close(self) -> None:
        """Wake every waiter (they end unfulfilled) and drop the keys."""
        self.closed = True
        self.data.clear()
        self.nbytes = 0
        self._wake()

    # ---- the handler

    async def handle(
        self,
        action: str,
        keys: list[str] | None = None,
        values: list[bytes] | None = None,
        amount: int = 0,
        timeout_s: float = 0.0,
    ) -> dict[str, Any]:
        """One operation of a rank's store (see the module docstring for the reply)."""
        keys, values = list(keys or []), [bytes(v) for v in values or []]
        try:
            return {"value": await self._do(action, keys, values, amount, timeout_s)}
        except StoreFull as e:
            return {"error": str(e), "timeout": False}
        except _Timeout as e:
            return {"error": str(e), "timeout": True}

    async def _do(
        self, op: str, keys: list[str], values: list[bytes], amount: int, timeout_s: float
    ) -> Any:
        if op in ("get", "multi_get", "wait"):
            if not await self.wait(keys, timeout_s):
                missing = [k for k in keys if k not in self.data]
                raise _Timeout(
                    f"rendezvous store: {len(missing)} of {len(keys)} keys did not come "
                    f"within {timeout_s:.1f} s (first missing: {missing[:1]})"
                )
            got = [self.data[k] for k in keys]  # a wait answers the values too: see
            # ClusterStore.wait (gloo gets each key right after waiting for it)
            return got[0] if op == "get" else got
        if op in ("set", "multi_set"):
            for key, value in zip(keys, values, strict=True):
                self.set(key, value)
            return None
        if op == "set_and_peek":  # a rank's own key, and its peers' already there
            self.set(keys[0], values[0])
            return self.siblings(keys[0])
        if op == "add":
            return self.add(keys[0], amount)
        if op == "compare_set":
            return self.compare_set(keys[0], values[0], values[1])
        if op == "append":
            self.append(keys[0], values[0])
            return None
        if op == "check":
            return self.check(keys)
        if op == "delete_key":
            return self.delete(keys[0])
        if op == "num_keys":
            return len(self.data)
        raise ValueError(f"unknown rendezvous store operation {op!r}")


class _Timeout(Exception):
    pass
