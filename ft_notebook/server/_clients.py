"""One Dask client per running cluster, kept from one poll to the next.

The panel asks for the workers of every cluster every 2 s, per open JupyterLab page.
A new client each time costs a TLS handshake and about 25 ms of the server's CPU, and
each connection comes and goes in the scheduler's log. A kept client is reused while
its cluster is the same process at the same address and the client still runs; one
that failed is closed and dropped, so the next poll connects afresh. The client of a
cluster that stopped, or was started again, is closed by the next request that lists
the clusters or asks one of them (the panel makes one every 2 s); the rest go with
the server's process (a module server extension has no unload hook).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ft_notebook.cluster import ClusterInfo


class Clients:
    def __init__(self, connect: Callable[[ClusterInfo], Any]) -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[tuple[str, int], Any]] = {}  # name -> ((address, pid), client)
        # one lock per cluster: a cluster that takes its time to answer a connect does
        # not hold up the polls of the others
        self._connecting: dict[str, threading.Lock] = {}

    def get(self, info: ClusterInfo) -> Any:
        """A client to ``info``'s cluster: the kept one if it still fits, else a new
        one (what ``connect`` raises, it raises)."""
        identity = (info.address, info.pid)
        with self._lock:
            connecting = self._connecting.setdefault(info.name, threading.Lock())
        with connecting:
            with self._lock:
                kept = self._kept.get(info.name)
            if kept is not None:
                if kept[0] == identity and getattr(kept[1], "status", "running") == "running":
                    return kept[1]
                self.drop(info.name, kept[1])
            client = self._connect(info)
            with self._lock:
                self._kept[info.name] = (identity, client)
            return client

    def drop(self, name: str, client: Any) -> None:
        """Close ``client`` and forget it, if it is still the one kept for ``name``."""
        with self._lock:
            kept = self._kept.get(name)
            if kept is not None and kept[1] is client:
                del self._kept[name]
        _close(client)

    def keep_only(self, running: Iterable[str]) -> None:
        """Close the clients of clusters that are no longer running."""
        alive = set(running)
        with self._lock:
            gone = [(n, c) for n, (_, c) in self._kept.items() if n not in alive]
            for name, _ in gone:
                del self._kept[name]
        for _, client in gone:
            _close(client)

    def close(self) -> None:
        self.keep_only(())


def _close(client: Any) -> None:
    with contextlib.suppress(Exception):  # a client of a dead cluster may fail to close
        client.close()
