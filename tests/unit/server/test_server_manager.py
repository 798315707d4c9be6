"""The REST API's manager, without a server, against a private data folder."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ft_notebook.events import (
    CheckpointCommitted,
    Health,
    HealthChanged,
    RecoveryCompleted,
    RunProgress,
    RunStarted,
    RunState,
    RunStateChanged,
    WorkerLost,
    cluster_topic,
    publish,
    run_topic,
)
from ft_notebook.server._manager import (
    BadRequest,
    NotFound,
    Refused,
    ResilienceManager,
    Unavailable,
)
from ft_notebook.store import CheckpointStore

BAD_NAMES = ["../etc", "a/b", "", ".hidden", "x" * 200, "a..b"]


WORKERS = {"workers": {"cpu0": 11, "cpu1": 12}, "gpus": ("GPU-1",)}


def test_clusters_lists_live_registry_entries_only(
    isolated_data_dir: Path, register_cluster: Callable[..., Any]
) -> None:
    manager = ResilienceManager()
    assert manager.clusters() == []
    register_cluster("alive", os.getpid(), **WORKERS)
    register_cluster("dead", 2**22 + 7, **WORKERS)  # beyond pid_max on most systems: no process
    [only] = manager.clusters()
    assert only.to_json() == {
        "name": "alive",
        "address": "tls://127.0.0.1:1",
        "pid": os.getpid(),
        "started": 1234.5,
        "gpus": ["GPU-1"],
        "workers": {"cpu0": 11, "cpu1": 12},
        "dashboard": None,
    }


def test_runs_carry_the_newest_state_from_their_journal(isolated_data_dir: Path) -> None:
    manager = ResilienceManager()
    assert manager.runs() == []
    publish(RunStateChanged(RunState.RUNNING, RunState.PENDING), run_topic("alpha"))
    publish(RunStateChanged(RunState.RECOVERING, RunState.RUNNING), run_topic("alpha"))
    publish(WorkerLost("cpu1", "tcp://x"), run_topic("alpha"))
    publish(WorkerLost("cpu0", "tcp://y"), run_topic("beta"))
    publish(WorkerLost("cpu0", "tcp://y"), cluster_topic())  # not a run
    runs = {r.name: r for r in manager.runs()}
    assert sorted(runs) == ["alpha", "beta"]
    assert runs["alpha"].state == "RECOVERING"
    assert runs["alpha"].last_seq == 3
    assert runs["alpha"].topic == run_topic("alpha")
    assert runs["beta"].state is None
    assert runs["beta"].to_json()["last_seq"] == 1


def test_runs_carry_health_progress_checkpoint_and_recoveries(isolated_data_dir: Path) -> None:
    topic = run_topic("gamma")
    publish(RunStateChanged(RunState.RUNNING, RunState.PENDING), topic)
    publish(RunProgress(step=10, total_steps=40, epoch=0, world_size=3, loss=0.5), topic)
    publish(CheckpointCommitted(checkpoint_step=8, nbytes=100), topic)
    publish(HealthChanged(Health.DEGRADED, Health.HEALTHY), topic)
    publish(RecoveryCompleted("lost: cpu2", 0.06, 0, 3, 2), topic)
    publish(RunProgress(step=12, total_steps=40, epoch=0, world_size=2, loss=0.25), topic)
    [run] = ResilienceManager().runs()
    assert (run.state, run.health) == (RunState.RUNNING, Health.DEGRADED)
    assert (run.step, run.total_steps, run.world_size, run.loss) == (12, 40, 2, 0.25)
    assert run.checkpoint_step == 8
    assert run.checkpoint_time is not None
    [recovery] = run.recoveries
    assert (recovery.cause, recovery.rto_s, recovery.workers_after) == ("lost: cpu2", 0.06, 2)
    out = json.loads(json.dumps(run.to_json()))
    assert out["state"] == "RUNNING"
    assert out["health"] == "DEGRADED"
    assert out["recoveries"][0]["steps_lost"] == 0


def test_runs_read_each_journal_on_from_where_they_left_it(isolated_data_dir: Path) -> None:
    manager, topic = ResilienceManager(), run_topic("epsilon")
    publish(RunStateChanged(RunState.RUNNING, RunState.PENDING), topic)
    assert [r.state for r in manager.runs()] == [RunState.RUNNING]
    journal = next((isolated_data_dir / "journal").glob("*epsilon*"))
    [(offset, _fold)] = manager._runs._folds.values()
    assert offset == journal.stat().st_size
    publish(RecoveryCompleted("lost: cpu1", 0.05, 0, 2, 1), topic)
    publish(RunStateChanged(RunState.COMPLETED, RunState.RUNNING), topic)
    [run] = manager.runs()
    assert (run.state, run.last_seq, len(run.recoveries)) == (RunState.COMPLETED, 3, 1)
    journal.write_text(journal.read_text().splitlines()[0] + "\n")  # replaced, shorter
    [run] = manager.runs()
    assert (run.state, run.last_seq, run.recoveries) == (RunState.RUNNING, 1, ())


def test_a_run_event_of_another_version_is_skipped_not_fatal(isolated_data_dir: Path) -> None:
    topic = run_topic("delta")
    publish(RunStateChanged(RunState.RUNNING, RunState.PENDING), topic)
    journal = next((isolated_data_dir / "journal").glob("*delta*"))
    line = json.loads(journal.read_text().splitlines()[0])
    line.update(seq=2, kind="recovery-completed", data={"cause": "x"})  # fields missing
    with journal.open("a") as f:
        f.write(json.dumps(line) + "\n")
    [run] = ResilienceManager().runs()
    assert (run.state, run.last_seq, run.recoveries) == (RunState.RUNNING, 2, ())


def _a_run_on(
    cluster: str,
    address: str,
    run: str,
    *,
    end: RunState | None = None,
    process: tuple[str, int, float] = ("", 0, 0.0),
) -> None:
    topic = run_topic(run)
    host, pid, started = process
    payload = RunStarted(
        total_steps=50,
        cluster=cluster,
        scheduler=address,
        host=host,
        pid=pid,
        pid_started=started,
    )
    publish(payload, topic)
    publish(RunStateChanged(RunState.RUNNING, RunState.PENDING), topic)
    publish(CheckpointCommitted(checkpoint_step=20, nbytes=10), topic)
    if end is not None:
        publish(RunStateChanged(end, RunState.RUNNING), topic)


def test_a_run_whose_cluster_is_gone_says_so(
    isolated_data_dir: Path, register_cluster: Callable[..., Any]
) -> None:
    """Issue 33: after ``ft.down`` the panel kept a run RUNNING, and the status bar kept
    counting its checkpoint's age. A run that never said it ended, on a registered
    cluster that is no longer running, is ``cluster_gone``; one on a cluster of the same
    name started since (another address) too."""
    live = register_cluster("default")
    _a_run_on("default", live.address, "on-live")
    _a_run_on("default", "tls://127.0.0.1:9", "on-an-earlier-default")
    _a_run_on("gone", "tls://127.0.0.1:8", "on-gone")
    _a_run_on("gone", "tls://127.0.0.1:8", "ended-before", end=RunState.COMPLETED)
    _a_run_on("", "tcp://10.0.0.1:8786", "on-an-outside-cluster")
    runs = {r.name: r for r in ResilienceManager().runs()}
    gone = {name for name, r in runs.items() if r.cluster_gone}
    assert gone == {"on-an-earlier-default", "on-gone"}
    assert runs["on-gone"].state is RunState.RUNNING  # the last word stays, marked
    assert runs["on-gone"].to_json()["cluster"] == "gone"
    assert runs["on-gone"].to_json()["cluster_gone"] is True


def test_a_run_whose_unregistered_cluster_died_with_its_process_is_shown_gone(
    isolated_data_dir: Path,
) -> None:
    """Issue 33: a run on ``cluster="local"`` (a cluster in the kernel's process, in no
    registry) whose kernel was killed stayed RUNNING in the panel for ever. The run
    tells its scheduler's process; a view on that host sees the process gone. A pid
    now held by another process (another start time) is gone too; one on another host
    says nothing here."""
    import socket
    import subprocess
    import sys

    import psutil

    here = socket.gethostname()
    me = psutil.Process()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_started = psutil.Process(dead.pid).create_time()
    dead.wait(timeout=60)  # exited and reaped: its pid names no process
    _a_run_on("", "tcp://127.0.0.1:1", "kernel-killed", process=(here, dead.pid, dead_started))
    _a_run_on("", "tcp://127.0.0.1:2", "kernel-alive", process=(here, me.pid, me.create_time()))
    _a_run_on("", "tcp://127.0.0.1:3", "pid-reused", process=(here, me.pid, 1.0))
    _a_run_on("", "tcp://10.0.0.1:4", "elsewhere", process=("another-host", dead.pid, 1.0))
    _a_run_on("", "tcp://127.0.0.1:5", "no-process-told")
    gone = {r.name for r in ResilienceManager().runs() if r.cluster_gone}
    assert gone == {"kernel-killed", "pid-reused"}


def test_runs_skip_journal_files_with_unsafe_names(isolated_data_dir: Path) -> None:
    folder = isolated_data_dir / "journal"
    folder.mkdir(mode=0o700)
    (folder / "ft-notebook.run...sneaky.jsonl").write_text("")
    assert ResilienceManager().runs() == []


def test_events_after_since_and_at_most_limit(isolated_data_dir: Path) -> None:
    topic = run_topic("gamma")
    for i in range(5):
        publish(WorkerLost(f"w{i}", "tcp://x"), topic)
    manager = ResilienceManager()
    assert [e["seq"] for e in manager.events(topic)] == [1, 2, 3, 4, 5]
    assert [e["seq"] for e in manager.events(topic, since="3")] == [4, 5]
    assert [e["data"]["name"] for e in manager.events(topic, since=1, limit="2")] == ["w1", "w2"]
    assert manager.events(run_topic("never-published")) == []


@pytest.mark.parametrize(
    ("topic", "since", "limit"),
    [
        *[(bad, "0", "10") for bad in BAD_NAMES],
        ("other.topic", "0", "10"),  # safe, but not one of ours
        ("ft-notebook.cluster", "-1", "10"),
        ("ft-notebook.cluster", "abc", "10"),
        ("ft-notebook.cluster", "0", "1.5"),
    ],
)
def test_events_reject_bad_input_with_400(
    isolated_data_dir: Path, topic: str, since: str, limit: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        ResilienceManager().events(topic, since, limit)
    assert caught.value.status == 400


def test_snapshots_are_described_by_their_manifests(isolated_data_dir: Path) -> None:
    with CheckpointStore(isolated_data_dir / "snapshots", keep=None, publish_events=False) as store:
        for step, (name, cell) in enumerate([("auto", 3), ("before-train", 7)], start=1):
            meta = {"name": name, "cell": cell, "size": 10 * step, "variables": ["a", "b"]}
            store.save("nb-0123abcd", step, {"x": step}, metadata=meta, pin=name != "auto")
    manager = ResilienceManager()
    rows = [s.to_json() for s in manager.snapshots("nb-0123abcd")]
    assert [(r["name"], r["step"], r["cell"], r["size"], r["pinned"]) for r in rows] == [
        ("auto", 1, 3, 10, False),
        ("before-train", 2, 7, 20, True),
    ]
    assert rows[0]["variables"] == ["a", "b"]
    assert 0 < rows[0]["time"] <= time.time()
    assert manager.snapshots("another-notebook") == []


@pytest.mark.parametrize("key", BAD_NAMES)
def test_snapshots_reject_path_like_keys_with_400(isolated_data_dir: Path, key: str) -> None:
    with pytest.raises(BadRequest):
        ResilienceManager().snapshots(key)
    assert not (isolated_data_dir / "etc").exists()


def test_chaos_is_refused_unless_turned_on(
    isolated_data_dir: Path, register_cluster: Callable[..., Any]
) -> None:
    register_cluster("alive", os.getpid(), **WORKERS)
    with pytest.raises(Refused, match=re.escape("ft-notebook.server.chaos-actions")) as caught:
        ResilienceManager().chaos("alive", "kill", "cpu0")
    assert caught.value.status == 403


@pytest.mark.parametrize(
    ("cluster", "action", "worker"),
    [
        ("alive", "explode", "cpu0"),
        ("alive", None, "cpu0"),
        ("../x", "kill", "cpu0"),
        ("alive", "kill", "../cpu0"),
        ("alive", "kill", None),
    ],
)
def test_chaos_rejects_bad_input_with_400(
    isolated_data_dir: Path, cluster: object, action: object, worker: object
) -> None:
    with pytest.raises(BadRequest):
        ResilienceManager(chaos_actions=True).chaos(cluster, action, worker)


def test_chaos_on_an_unknown_cluster_is_404(isolated_data_dir: Path) -> None:
    with pytest.raises(NotFound, match="No cluster named 'nope'"):
        ResilienceManager(chaos_actions=True).chaos("nope", "kill", "cpu0")


def test_chaos_on_an_unreachable_cluster_is_503(
    isolated_data_dir: Path, register_cluster: Callable[..., Any]
) -> None:
    register_cluster("alive", os.getpid(), **WORKERS)  # registered, but its certificates are gone
    with pytest.raises(Unavailable, match="certificates") as caught:
        ResilienceManager(chaos_actions=True).chaos("alive", "hang", "cpu0")
    assert caught.value.status == 503


def test_workers_of_an_unknown_cluster_is_404(isolated_data_dir: Path) -> None:
    with pytest.raises(NotFound, match="No cluster named 'nope'"):
        ResilienceManager().workers("nope")


@pytest.mark.parametrize("name", BAD_NAMES)
def test_workers_reject_path_like_cluster_names_with_400(
    isolated_data_dir: Path, name: str
) -> None:
    with pytest.raises(BadRequest):
        ResilienceManager().workers(name)


def test_workers_of_an_unreachable_cluster_is_503(
    isolated_data_dir: Path, register_cluster: Callable[..., Any]
) -> None:
    register_cluster("alive", os.getpid(), **WORKERS)  # registered, but its certificates are gone
    with pytest.raises(Unavailable, match="certificates"):
        ResilienceManager().workers("alive")


def test_a_cluster_that_stops_answering_is_503_and_its_client_is_closed(
    isolated_data_dir: Path,
    register_cluster: Callable[..., Any],
) -> None:
    register_cluster("alive", os.getpid(), **WORKERS)

    class Dropped:
        closed = False

        def run_on_scheduler(self, *args: object, **kwargs: object) -> object:
            raise OSError("Stream is closed")

        def close(self) -> None:
            self.closed = True

    client = Dropped()
    with pytest.raises(Unavailable, match="stopped answering"):
        ResilienceManager(connect=lambda info: client).workers("alive")
    assert client.closed


class _Client:
    """A stand-in Dask client: answers the workers query, records that it was closed."""

    def __init__(self) -> None:
        self.closed = False
        self.status = "running"

    def run_on_scheduler(self, *args: object, **kwargs: object) -> list[object]:
        return []

    def close(self) -> None:
        self.closed = True
        self.status = "closed"


def test_a_clusters_client_is_kept_between_polls_and_replaced_when_it_restarts(
    isolated_data_dir: Path, register_cluster: Callable[..., Any]
) -> None:
    import subprocess

    from ft_notebook.cluster._registry import Registry

    made: list[_Client] = []

    def connect(info: Any) -> _Client:
        made.append(_Client())
        return made[-1]

    manager = ResilienceManager(connect=connect)
    register_cluster("alive", os.getpid(), **WORKERS)
    for _ in range(3):
        assert manager.workers("alive") == []
    assert len(made) == 1  # one connection for every poll
    assert not made[0].closed

    other = subprocess.Popen(["sleep", "60"])  # the cluster started again: another process
    try:
        register_cluster("alive", other.pid, **WORKERS)
        manager.workers("alive")
        assert len(made) == 2
        assert made[0].closed  # the old cluster's client is closed
        made[1].status = "closed"  # the client itself gave up: a new one, not it
        manager.workers("alive")
        assert len(made) == 3
        Registry.at(isolated_data_dir).remove("alive")
        assert [c.name for c in manager.clusters()] == []
        assert made[2].closed  # "alive" is no longer running: its client is closed
        register_cluster("another", os.getpid(), **WORKERS)
        manager.workers("another")
        manager.close()
        assert all(c.closed for c in made)
    finally:
        other.kill()
        other.wait()


def test_a_hung_scheduler_is_503_within_the_connect_timeout_and_its_client_dropped(
    isolated_data_dir: Path, register_cluster: Callable[..., Any]
) -> None:
    register_cluster("alive", os.getpid(), **WORKERS)
    waited: list[object] = []

    class Hung(_Client):
        def run_on_scheduler(self, *args: object, **kwargs: object) -> list[object]:
            waited.append(kwargs.get("callback_timeout"))  # Dask's own deadline
            raise TimeoutError("no answer")

    made: list[_Client] = []
    manager = ResilienceManager(connect=lambda info: made.append(Hung()) or made[-1])
    with pytest.raises(Unavailable, match="stopped answering"):
        manager.workers("alive")
    assert waited == [15.0]  # ft-notebook.cluster.connect-timeout
    assert made[0].closed
    with pytest.raises(Unavailable):
        manager.workers("alive")
    assert len(made) == 2  # the next poll connects afresh
