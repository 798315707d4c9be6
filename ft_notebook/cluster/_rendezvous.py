"""The rendezvous store the control plane hosts: a torch TCPStore on the scheduler's host.

Workers meet through it when they form a process group (addresses, ranks, step
numbers, flags). It lives in the scheduler process, which outlives every worker, and
collectives keep working if it goes. ``TCPStore`` alone listens on every interface;
here it is handed a socket bound to the cluster's own host, so it follows the
loopback rule. It has no authentication: it must carry only small values that
consumers parse as data, never unpickle or execute.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Rendezvous:
    host: str
    port: int
    store: Any
    sock: socket.socket = field(repr=False)

    def forget(self, prefix: str) -> int:
        """Delete every key under ``prefix`` (a group that will never meet again);
        returns how many. Blocks on the store: not on the event loop."""
        gone = [k for k in self.store.list_keys() if k.startswith(prefix)]
        for key in gone:
            self.store.delete_key(key)
        return len(gone)


def open_store(host: str) -> Rendezvous:
    import torch.distributed as dist

    # TCPStore alone listens on every interface; bind the socket ourselves so the
    # store follows the cluster's loopback rule.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    store = dist.TCPStore(  # type: ignore[attr-defined]
        host, port, None, True, wait_for_workers=False, master_listen_fd=sock.fileno()
    )
    return Rendezvous(host=host, port=port, store=store, sock=sock)
