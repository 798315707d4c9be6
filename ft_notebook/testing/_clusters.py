"""A private ft_notebook cluster for one test module, always shut down after it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def private_cluster(prefix: str = "t", workers: int = 2) -> Iterator[Any]:
    """Start a detached private cluster under a fresh name; yield a Client to it; then
    close the client and stop the cluster, whatever happened in between."""
    from ft_notebook.cluster import cluster, down

    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client = None
    try:
        client = cluster(name=name, workers=workers, set_as_default=False)
        yield client
    finally:
        if client is not None:
            client.close()
        down(name)
