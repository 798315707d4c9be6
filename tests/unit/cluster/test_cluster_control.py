"""The control plane's logic against a stand-in scheduler (real ones: integration, chaos)."""

from __future__ import annotations

import asyncio
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from distributed.core import Status

from ft_notebook.cluster.plugins import (
    HEALTH_METRIC,
    ControlPlane,
    MemberState,
    control_plane,
    signal_worker_process,
)
from ft_notebook.events import cluster_topic, history
from ft_notebook.exceptions import ClusterError


@dataclass
class FakeWorkerState:
    name: str
    address: str
    pid: int
    nanny: str | None = "tls://127.0.0.1:900"
    last_seen: float = field(default_factory=time.time)
    status: Status = Status.running
    processing: set[str] = field(default_factory=set)
    memory_limit: int = 2**30
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class FakeScheduler:
    address: str = "tls://127.0.0.1:8786"
    workers: dict[str, FakeWorkerState] = field(default_factory=dict)
    plugins: dict[str, Any] = field(default_factory=dict)
    clients: dict[str, Any] = field(default_factory=dict)
    queued: list[Any] = field(default_factory=list)
    unrunnable: dict[str, Any] = field(default_factory=dict)
    logged: list[tuple[str, Any]] = field(default_factory=list)
    broadcasts: list[dict[str, Any]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    nanny_answer: Any = None

    def log_event(self, topic: str, msg: Any) -> None:
        self.logged.append((topic, msg))

    async def broadcast(self, **kw: Any) -> dict[str, Any]:
        self.broadcasts.append(kw)
        return {w: self.nanny_answer for w in kw["workers"]}

    async def remove_worker(self, address: str, **kw: Any) -> None:
        self.removed.append(address)


def _join(s: FakeScheduler, plane: ControlPlane, name: str, address: str, pid: int) -> None:
    health = {"pid": pid, "gpu_id": "GPU-1" if name.startswith("gpu") else None}
    s.workers[address] = FakeWorkerState(name, address, pid, metrics={HEALTH_METRIC: health})
    plane.add_worker(s, address)


def _leave(s: FakeScheduler, plane: ControlPlane, address: str) -> None:
    del s.workers[address]
    plane.remove_worker(s, address, stimulus_id="test")


@pytest.fixture
def setup() -> tuple[FakeScheduler, ControlPlane, int]:
    s = FakeScheduler()
    plane = ControlPlane(hung_after_s=2.0, evict_hung=False)
    plane.scheduler = s
    s.plugins[plane.name] = plane
    seq = max((e.seq for e in history(cluster_topic())), default=0)
    return s, plane, seq


def _events(since: int) -> list[tuple[str, str, Any]]:
    return [(e.kind, e.worker or "", dict(e.data)) for e in history(cluster_topic(), since=since)]


def test_members_are_keyed_by_stable_name_across_restarts(
    setup: tuple[FakeScheduler, ControlPlane, int],
) -> None:
    s, plane, seq = setup
    _join(s, plane, "gpu0", "tls://127.0.0.1:1001", 11)
    _leave(s, plane, "tls://127.0.0.1:1001")
    assert plane.members["gpu0"].state is MemberState.LOST
    _join(s, plane, "gpu0", "tls://127.0.0.1:1002", 12)  # restarted: new address, pid
    member = plane.members["gpu0"]
    assert (member.address, member.pid, member.gpu, member.restarts) == (
        "tls://127.0.0.1:1002",
        12,
        "GPU-1",
        1,
    )
    kinds = [(k, w) for k, w, _ in _events(seq)]
    assert kinds == [("worker-joined", "gpu0"), ("worker-lost", "gpu0"), ("worker-joined", "gpu0")]
    assert _events(seq)[2][2] == {
        "name": "gpu0",
        "address": "tls://127.0.0.1:1002",
        "pid": 12,
        "gpu": "GPU-1",
    }
    assert [t for t, _ in s.logged] == [cluster_topic()] * 3  # live through the scheduler


def test_a_silent_worker_is_hung_once_and_a_busy_one_is_not(
    setup: tuple[FakeScheduler, ControlPlane, int],
) -> None:
    s, plane, seq = setup
    _join(s, plane, "cpu0", "tls://127.0.0.1:2000", 1)
    _join(s, plane, "cpu1", "tls://127.0.0.1:2001", 2)
    now = time.time()
    s.workers["tls://127.0.0.1:2000"].last_seen = now - 2.5  # stopped heartbeating
    s.workers["tls://127.0.0.1:2001"].last_seen = now - 0.4  # busy in a task, heartbeats still come
    s.workers["tls://127.0.0.1:2001"].processing = {"long-task"}
    assert plane.check_heartbeats(now) == ["cpu0"]
    assert plane.check_heartbeats(now + 0.25) == []  # reported once
    assert plane.members["cpu0"].state is MemberState.HUNG
    _leave(s, plane, "tls://127.0.0.1:2000")
    events = _events(seq)
    assert [k for k, _, _ in events][-2:] == ["worker-hung", "worker-lost"]
    assert events[-2][2]["heartbeat_age_s"] == 2.5
    assert events[-1][2]["cause"].startswith("evicted: no heartbeat for 2.5 s")


def test_the_threshold_follows_the_schedulers_heartbeat_schedule(
    setup: tuple[FakeScheduler, ControlPlane, int],
) -> None:
    s, plane, _ = setup
    assert plane.threshold() == 2.0  # 3 x 0.5 s < 2 s
    for i in range(60):  # 60 workers: Dask asks for 2 s heartbeats
        s.workers[f"w{i}"] = FakeWorkerState(f"w{i}", f"w{i}", i)
    assert plane.threshold() == 6.0


def test_a_stall_of_the_schedulers_own_loop_is_not_a_hang(
    setup: tuple[FakeScheduler, ControlPlane, int],
) -> None:
    s, plane, _ = setup
    _join(s, plane, "cpu0", "tls://127.0.0.1:2000", 1)
    now = time.time()
    plane.check_heartbeats(now)
    assert plane._last_tick is not None
    plane._last_tick -= 5.0  # the loop was blocked for 5 s (an import, a big graph)
    s.workers["tls://127.0.0.1:2000"].last_seen = now - 5.0  # its heartbeats are still unread
    assert plane.check_heartbeats(now) == []
    assert plane.check_heartbeats(now + 1.0) == []  # within the grace
    assert plane.check_heartbeats(now + 2.5) == ["cpu0"]  # still silent after it


def test_eviction_goes_through_the_nanny_then_falls_back(
    setup: tuple[FakeScheduler, ControlPlane, int],
) -> None:
    s, plane, _ = setup
    _join(s, plane, "cpu0", "tls://127.0.0.1:1001", 4242)
    s.nanny_answer = {"status": "OK", "result": 4242}
    assert asyncio.run(plane.evict("tls://127.0.0.1:1001")) == "nanny"
    msg = s.broadcasts[0]
    assert (msg["nanny"], msg["workers"], msg["msg"]["op"]) == (
        True,
        ["tls://127.0.0.1:1001"],
        "run",
    )
    s.nanny_answer = {"status": "error"}
    s.workers["tls://127.0.0.1:1001"].pid = 0  # nothing to kill from here
    assert asyncio.run(plane.evict("tls://127.0.0.1:1001")) == "removed"
    assert s.removed == ["tls://127.0.0.1:1001"]
    assert asyncio.run(plane.evict("tls://gone:1")) == "gone"


def test_holds_clients_and_tasks_keep_it_busy(
    setup: tuple[FakeScheduler, ControlPlane, int],
) -> None:
    s, plane, _ = setup
    s.clients["fire-and-forget"] = object()
    assert plane.busy_reasons() == []
    plane.hold("run:r1")
    s.clients["Client-1"] = object()
    _join(s, plane, "cpu0", "tls://127.0.0.1:2000", 1)
    s.workers["tls://127.0.0.1:2000"].processing = {"t1", "t2"}
    assert plane.busy_reasons() == ["hold 'run:r1'", "1 client(s)", "2 task(s)"]
    plane.release("run:r1")
    plane.release("never-held")
    del s.clients["Client-1"]
    s.workers["tls://127.0.0.1:2000"].processing = set()
    assert plane.busy_reasons() == []


def test_a_shutdown_is_not_reported_as_lost_workers(
    setup: tuple[FakeScheduler, ControlPlane, int],
) -> None:
    s, plane, seq = setup
    _join(s, plane, "cpu0", "tls://127.0.0.1:2000", 1)
    plane.closing = True
    _leave(s, plane, "tls://127.0.0.1:2000")
    assert [k for k, _, _ in _events(seq)] == ["worker-joined"]


def test_rows_list_live_and_lost_workers(setup: tuple[FakeScheduler, ControlPlane, int]) -> None:
    s, plane, _ = setup
    _join(s, plane, "cpu0", "tls://127.0.0.1:2000", 1)
    _join(s, plane, "cpu1", "tls://127.0.0.1:2001", 2)
    _leave(s, plane, "tls://127.0.0.1:2001")
    rows = {r["name"]: r for r in plane.rows()}
    assert rows["cpu0"]["state"] == "running"
    assert rows["cpu0"]["heartbeat_age_s"] is not None
    assert rows["cpu1"]["state"] == "lost"
    assert rows["cpu1"]["heartbeat_age_s"] is None


def test_it_travels_to_a_scheduler_as_settings_only() -> None:
    plane = ControlPlane(hung_after_s=3.0)
    plane.members["x"] = None  # type: ignore[assignment]
    copy = pickle.loads(pickle.dumps(plane))
    assert (copy.hung_after_s, copy.evict_hung, copy.members, copy.scheduler) == (
        3.0,
        True,
        {},
        None,
    )


def test_other_plugins_find_it_or_get_a_clear_error() -> None:
    s = FakeScheduler()
    with pytest.raises(ClusterError, match="attach"):
        control_plane(s)
    plane = ControlPlane()
    s.plugins[plane.name] = plane
    assert control_plane(s) is plane


def test_signalling_a_worker_process_that_has_just_died_says_so() -> None:
    """A drill's kill came right after another fault had killed the same worker: its
    nanny still named the dead process, and ``os.kill`` raised a bare
    ProcessLookupError through ``%ft chaos kill`` (and the drills' harness, which takes
    a ClusterError for a worker gone meanwhile)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # exited and reaped: its pid names no process

    class Nanny:
        pid, address = gone.pid, "tcp://127.0.0.1:900"

    with pytest.raises(ClusterError, match=rf"process {gone.pid} .* has exited already"):
        signal_worker_process(int(signal.SIGKILL), dask_worker=Nanny())
