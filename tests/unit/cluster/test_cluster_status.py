"""Status rows and their table; chaos target choice."""

from __future__ import annotations

import random

import pytest

from ft_notebook.cluster import WorkerStatus, format_table
from ft_notebook.cluster.chaos import choose
from ft_notebook.exceptions import ClusterError


def test_rows_carry_gpu_health_and_the_table_shows_it() -> None:
    row = {
        "name": "gpu0",
        "address": "tls://127.0.0.1:1",
        "state": "running",
        "pid": 42,
        "gpu": "GPU-abc",
        "heartbeat_age_s": 0.31,
        "rss": 3 * 2**30,
        "memory_limit": 16 * 2**30,
        "tasks": 1,
        "restarts": 2,
        "cause": "",
        "gpu_health": {
            "memory_used": 2**30,
            "memory_total": 80 * 2**30,
            "utilization": 97,
            "temperature": 61,
            "ecc_uncorrected": 0,
        },
        "unknown-from-a-newer-version": 1,
    }
    status = WorkerStatus.from_row(row)
    assert (status.gpu_utilization, status.gpu_temperature, status.gpu_ecc_uncorrected) == (
        97,
        61,
        0,
    )
    lost = WorkerStatus(name="cpu1", address="tls://x", state="lost", cause="evicted: hung")
    table = format_table([status, lost])
    lines = table.splitlines()
    assert lines[0].split() == [
        "worker",
        "state",
        "pid",
        "heartbeat",
        "memory",
        "tasks",
        "restarts",
        "gpu",
    ]
    assert "gpu0" in lines[2]
    assert "0.3 s ago" in lines[2]
    assert "3.0 GiB / 16.0 GiB" in lines[2]
    assert "1.0 GiB / 80.0 GiB, 97%, 61°C, ecc 0" in lines[2]
    assert lines[3].split()[:3] == ["cpu1", "lost", "-"]
    assert lines[-1] == "cpu1: evicted: hung"
    assert format_table([]) == "(no workers)"


WORKERS = [
    {"name": "cpu0", "address": "a0", "nanny": "n0", "pid": 1},
    {"name": "cpu1", "address": "a1", "nanny": "n1", "pid": 2},
]


def test_chaos_targets_by_stable_name_or_at_random() -> None:
    assert choose(WORKERS, "cpu1", None)["address"] == "a1"
    picks = {choose(WORKERS, "random", random.Random(seed))["name"] for seed in range(20)}
    assert picks == {"cpu0", "cpu1"}
    with pytest.raises(ClusterError, match=r"No worker is named 'gpu9'; .*\['cpu0', 'cpu1'\]"):
        choose(WORKERS, "gpu9", None)
    with pytest.raises(ClusterError, match="no workers"):
        choose([], "random", None)


class _SchedulerThatDroppedTheWorker:
    """Lists cpu1, then answers the signal as Dask's scheduler does for a worker it
    removed in between (a KeyError from its ``broadcast``)."""

    def run_on_scheduler(self, fn: object) -> list[dict[str, object]]:
        return WORKERS

    def run(self, *args: object, workers: list[str], **kwargs: object) -> dict[str, int]:
        raise KeyError(workers[0])


def test_a_worker_gone_between_the_listing_and_the_signal_is_a_cluster_error() -> None:
    """A chaos drill killed a worker at the moment the scheduler removed it, and got
    the scheduler's bare KeyError; callers (the drills, ``%ft chaos``) expect a
    ClusterError for a worker that is gone."""
    from ft_notebook.cluster.chaos import kill_worker

    with pytest.raises(ClusterError, match=r"'cpu1' left before it could be signalled"):
        kill_worker(_SchedulerThatDroppedTheWorker(), "cpu1")
