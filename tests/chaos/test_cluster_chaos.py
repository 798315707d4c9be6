"""Drills on a private cluster: killed and hung workers are seen, evicted and replaced."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Iterator
from typing import Any

import cloudpickle
import numpy as np
import psutil
import pytest
from distributed import Client

from ft_notebook.cluster import status
from ft_notebook.cluster.chaos import hang_worker, kill_worker, resume_worker
from ft_notebook.cluster.plugins import control_plane
from ft_notebook.events import Event, cluster_topic, history
from ft_notebook.testing import poll_for, private_cluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # for client.run


@pytest.fixture(scope="module")
def drill() -> Iterator[Client]:
    with private_cluster("t-drill") as client:
        yield client


@pytest.fixture
def ready(drill: Client) -> dict[str, Any]:
    """Both workers running (a previous drill's victim may still be restarting)."""

    def both() -> dict[str, Any] | None:
        rows = {r.name: r for r in status(drill)}
        running = len(drill.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.workers)))
        ok = running == 2 and [r.state for r in rows.values()] == ["running"] * 2
        return rows if ok else None

    return poll_for(both, timeout=60, what="both workers running")


def _last_seq() -> int:
    return max((e.seq for e in history(cluster_topic())), default=0)


def _events_of(worker: str, since: int) -> list[Event]:
    return [e for e in history(cluster_topic(), since=since) if e.worker == worker]


def _await_kinds(worker: str, since: int, kinds: list[str], timeout: float = 60) -> list[Event]:
    def arrived() -> list[Event] | None:
        events = [e for e in _events_of(worker, since) if e.kind in kinds]
        return events if [e.kind for e in events][: len(kinds)] == kinds else None

    return poll_for(arrived, timeout=timeout, what=f"{kinds} for {worker}")


def _threshold(client: Client) -> float:
    return float(
        client.run_on_scheduler(lambda dask_scheduler: control_plane(dask_scheduler).threshold())
    )


def _dot_seconds(client: Client, address: str, n: int) -> float:
    """Run one n×n matrix product as a task on ``address``; its compute time there."""
    client.get_task_stream(count=1)  # installs the scheduler's task-stream recorder
    started = time.time() - 1
    a = client.submit(np.random.random, (n, n), workers=[address], pure=False)
    product = client.submit(np.dot, a, a, workers=[address], pure=False)
    assert product.exception(timeout=300) is None  # done, its result stays there
    key = product.key
    del a, product
    (task,) = [t for t in client.get_task_stream(start=started) if t["key"] == key]
    (compute,) = [s for s in task["startstops"] if s["action"] == "compute"]
    return float(compute["stop"] - compute["start"])


def test_a_worker_busy_in_one_long_numpy_call_is_not_evicted(
    drill: Client, ready: dict[str, Any]
) -> None:
    busy = ready["cpu0"]
    threshold = _threshold(drill)
    since = _last_seq()
    # size one product to last about 3 hang thresholds on this machine
    small = max(_dot_seconds(drill, busy.address, 1000), 1e-3)
    n = int(1000 * (3 * threshold / small) ** (1 / 3))
    for _ in range(4):  # a shared machine's speed changes: size again until it is long
        seconds = _dot_seconds(drill, busy.address, n)
        print(f"one {n}x{n} product: {seconds:.2f} s, hang threshold {threshold:.2f} s")
        if seconds > threshold:
            break
        n = int(n * (3 * threshold / max(seconds, 1e-3)) ** (1 / 3))
    assert seconds > threshold, f"a {n}x{n} product took {seconds:.2f} s: not a long call"
    assert [e.kind for e in _events_of("cpu0", since)] == []  # never hung, never lost
    assert {r.name: r.pid for r in status(drill)}["cpu0"] == busy.pid


def test_a_killed_worker_is_reported_lost_and_rejoins_under_its_name(
    drill: Client, ready: dict[str, Any]
) -> None:
    since = _last_seq()
    action = kill_worker(drill, "cpu1")
    assert (action.signal, action.worker, action.pid) == ("SIGKILL", "cpu1", ready["cpu1"].pid)
    lost, joined = _await_kinds("cpu1", since, ["worker-lost", "worker-joined"])
    assert lost.data["address"] == action.address
    assert joined.data["name"] == "cpu1"
    assert joined.data["pid"] != action.pid
    assert joined.data["address"] != action.address  # a new process, a new address
    row = {r.name: r for r in status(drill)}["cpu1"]
    assert (row.state, row.pid, row.restarts) == ("running", joined.data["pid"], 1)
    assert drill.submit(sum, [3, 4], workers=["cpu1"], pure=False).result() == 7


def test_a_stopped_worker_is_reported_hung_evicted_and_replaced(
    drill: Client, ready: dict[str, Any]
) -> None:
    since = _last_seq()
    threshold = _threshold(drill)
    action = hang_worker(drill, "random", rng=random.Random(5))
    assert action.signal == "SIGSTOP"
    hung, lost, joined = _await_kinds(
        action.worker, since, ["worker-hung", "worker-lost", "worker-joined"]
    )
    assert hung.data["heartbeat_age_s"] >= threshold
    assert lost.data["cause"].startswith("evicted: no heartbeat")
    assert joined.data["pid"] != action.pid
    poll_for(lambda: not _alive(action.pid), timeout=10, what="the hung process to be gone")


def test_a_worker_resumed_in_time_carries_on(drill: Client, ready: dict[str, Any]) -> None:
    since = _last_seq()
    hang_worker(drill, "cpu0")
    resumed = resume_worker(drill, "cpu0")
    assert resumed.pid == ready["cpu0"].pid
    assert drill.submit(sum, [1, 2], workers=["cpu0"], pure=False).result() == 3
    assert "worker-lost" not in [e.kind for e in _events_of("cpu0", since)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
