"""The rank's client of the cluster's rendezvous store: a ``torch.distributed.Store``
whose every operation is a call of the scheduler's ``ft_rendezvous`` handler over the
worker's own connection to the scheduler.

That connection is the cluster's (TLS with the cluster's certificate for the clusters
ft_notebook starts), so the rendezvous opens no port another user could reach (the
``TCPStore`` it replaces accepted anyone: issue 36). gloo and NCCL take it as any store
(they call ``set``, ``get``, ``wait``, ``add``); ``PrefixStore`` wraps it as usual.

Ranks call it from their own threads (a group's setup blocks its caller), never from
the worker's event loop: each call is carried to the loop with
:func:`distributed.utils.sync` and waits there for the scheduler's answer. Blocking
operations (``get``, ``wait``) wait in the scheduler, up to the store's timeout.

A call costs one Dask RPC (about 0.8 ms over TLS on loopback on an idle machine,
against about 0.1 ms for a TCPStore's), so round trips are saved where a rendezvous
allows. gloo sets its rank's key, then waits for each peer's key in turn and gets it.
So a ``set`` also answers the keys already in its folder (its peers' that came
first), and a wait or get of a key known so is answered here: the last rank to arrive
forms its group with one call instead of one per peer. A wait answers the values too,
which the next gets take; and a wait for keys this client wrote is answered from what
it wrote. (Under a group's fresh prefix each rank's key is written by that rank only,
once; a client used otherwise must not count on seeing another's overwrite of a key
it has seen.)
"""

from __future__ import annotations

import datetime
from typing import Any

import torch.distributed as dist
from distributed.utils import sync

from ft_notebook.cluster._rendezvous import HANDLER

#: What a call may take beyond its own wait before the rank gives up on the scheduler.
_REPLY_MARGIN_S = 30.0


def _bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


class ClusterStore(dist.Store):  # type: ignore[misc,name-defined]
    """A store in the scheduler, reached through ``worker``'s scheduler connection;
    ``timeout_s`` bounds each ``get`` and ``wait``."""

    def __init__(self, worker: Any, timeout_s: float) -> None:
        super().__init__()
        self.worker = worker
        self.timeout_s = float(timeout_s)
        #: What the last call, a wait, found: for the next call only.
        self._waited: dict[str, bytes] = {}
        #: The keys this client set, with their values (dropped by any other write).
        self._mine: dict[str, bytes] = {}
        #: Peers' keys a set answered (written once, under a fresh prefix).
        self._known: dict[str, bytes] = {}

    def _call(self, op: str, keys: list[str], timeout_s: float = 0.0, **kw: Any) -> Any:
        self._waited = {}
        handler = getattr(self.worker.scheduler, HANDLER)

        async def call() -> Any:
            return await handler(action=op, keys=keys, timeout_s=timeout_s, **kw)

        reply = sync(self.worker.loop, call, callback_timeout=timeout_s + _REPLY_MARGIN_S)
        if "error" in reply:
            raise dist.DistStoreError(reply["error"])
        return reply["value"]

    def _wait_s(self, timeout: datetime.timedelta | None) -> float:
        return self.timeout_s if timeout is None else timeout.total_seconds()

    # ---- torch.distributed.Store

    def set(self, key: str, value: Any) -> None:
        peers = self._call("set_and_peek", [key], values=[_bytes(value)])
        self._known.update({str(k): bytes(v) for k, v in dict(peers or {}).items()})
        self._mine[key] = _bytes(value)

    def get(self, key: str) -> bytes:
        if key in self._waited:
            value, self._waited = self._waited[key], {}
            return bytes(value)
        if key in self._known:
            return self._known[key]
        return bytes(self._call("get", [key], self.timeout_s))

    def add(self, key: str, amount: int) -> int:
        self._mine.pop(key, None)
        return int(self._call("add", [key], amount=int(amount)))

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        self._mine.pop(key, None)
        return bytes(self._call("compare_set", [key], values=[_bytes(expected), _bytes(desired)]))

    def append(self, key: str, value: Any) -> None:
        self._mine.pop(key, None)
        self._call("append", [key], values=[_bytes(value)])

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        keys = list(keys)
        here = {**self._known, **self._mine}
        if all(k in here for k in keys):
            self._waited = {k: here[k] for k in keys}
            return
        values = self._call("wait", keys, self._wait_s(timeout))
        self._waited = dict(zip(keys, values, strict=True))

    def check(self, keys: list[str]) -> bool:
        return bool(self._call("check", list(keys)))

    def delete_key(self, key: str) -> bool:
        self._mine.pop(key, None)
        return bool(self._call("delete_key", [key]))

    def num_keys(self) -> int:
        return int(self._call("num_keys", []))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return [bytes(v) for v in self._call("multi_get", list(keys), self.timeout_s)]

    def multi_set(self, keys: list[str], values: list[Any]) -> None:
        for key in keys:
            self._mine.pop(key, None)
        self._call("multi_set", list(keys), values=[_bytes(v) for v in values])

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        self.timeout_s = timeout.total_seconds()
