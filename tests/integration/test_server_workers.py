"""The manager's cluster calls against a real LocalCluster (through its connect seam)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

import psutil
import pytest
from distributed import Client

from ft_notebook.server._manager import NotFound, ResilienceManager


@pytest.fixture
def registered(register_cluster: Callable[..., Any]) -> str:
    """A registry entry (for this process) in a data folder of this test alone."""
    return register_cluster("lab").name


@pytest.fixture
def manager(cluster: Any) -> Iterator[ResilienceManager]:
    """Chaos on; every registered cluster is answered by the LocalCluster fixture."""
    manager = ResilienceManager(
        chaos_actions=True, connect=lambda info: Client(cluster, set_as_default=False)
    )
    yield manager
    manager.close()  # the client it keeps between calls


def test_workers_lists_each_worker_with_its_health(
    registered: str, manager: ResilienceManager, cluster: Any
) -> None:
    rows = [asdict(w) for w in manager.workers(registered)]
    expected = sorted(str(w.name) for w in cluster.workers.values())
    assert sorted(r["name"] for r in rows) == expected
    assert {r["state"] for r in rows} == {"running"}
    assert all(isinstance(r["pid"], int) and psutil.pid_exists(r["pid"]) for r in rows)


def test_chaos_resume_signals_the_named_worker(registered: str, manager: ResilienceManager) -> None:
    target = manager.workers(registered)[0]
    done = manager.chaos(registered, "resume", target.name)
    assert (done.signal, done.worker, done.pid) == ("SIGCONT", target.name, target.pid)
    assert done.to_json()["cluster"] == registered


def test_chaos_on_an_unknown_worker_is_404(registered: str, manager: ResilienceManager) -> None:
    with pytest.raises(NotFound, match="No worker is named 'w99'"):
        manager.chaos(registered, "kill", "w99")
