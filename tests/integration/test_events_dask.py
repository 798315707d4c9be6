"""Events through a real Dask scheduler: across clients, from workers, after the end."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

import dask.config
from distributed import Client, LocalCluster

from ft_notebook import _delivery
from ft_notebook.config import cluster_dask_config
from ft_notebook.events import (
    Event,
    WorkerJoined,
    WorkerLost,
    history,
    publish,
    run_topic,
    subscribe,
)
from ft_notebook.testing import poll_for


def _publish_from_worker(topic: str) -> int:
    from distributed import get_worker

    # no `via`: the event finds its way through the worker this task runs in
    return publish(WorkerJoined(name=get_worker().name, address=get_worker().address), topic).seq


def test_events_cross_clients_and_outlive_client_and_scheduler(unique_name: str) -> None:
    topic = run_topic(unique_name)
    received: list[Event] = []
    with (
        dask.config.set(cluster_dask_config()),
        LocalCluster(
            n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0"
        ) as lc,
        Client(lc, set_as_default=False) as reader,
    ):
        sub = subscribe(topic, received.append, via=reader)
        with Client(lc, set_as_default=False) as writer:
            for i in range(3):
                publish(WorkerLost(name=f"w{i}", address="tcp://gone"), topic, via=writer)
            assert writer.submit(_publish_from_worker, topic, pure=False).result() == 4
        poll_for(lambda: len(received) == 4, timeout=15, what="4 events to arrive live")
        sub.close()
        assert reader.id not in _delivery._FANOUTS  # the last subscription let go of it
        # the scheduler keeps them too, for publishers on other machines
        assert [e.seq for e in history(topic, via=reader)] == [1, 2, 3, 4]

    assert [e.seq for e in received] == [1, 2, 3, 4]
    assert [e.kind for e in received] == ["worker-lost"] * 3 + ["worker-joined"]
    assert received[3].data["name"] == 0  # LocalCluster names its worker 0
    # The cluster is gone; a new process reads the same history from the journal.
    code = (
        "import sys, json; from ft_notebook.events import history; "
        "print(json.dumps([e.to_dict() for e in history(sys.argv[1])]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, topic], capture_output=True, text=True, check=True
    )
    import json

    assert [Event.from_dict(d) for d in json.loads(out.stdout)] == received == history(topic)


def test_subscriber_arriving_mid_stream_sees_each_event_once_in_order(
    client: Any, cluster: Any, unique_name: str
) -> None:
    topic = run_topic(unique_name)
    total = 300
    halfway = threading.Event()

    def publisher() -> None:
        with Client(cluster, set_as_default=False) as writer:
            for i in range(total):
                publish(WorkerLost(name="w", address="a"), topic, via=writer)
                if i == total // 3:
                    halfway.set()

    thread = threading.Thread(target=publisher)
    thread.start()
    assert halfway.wait(timeout=60)
    seen: list[int] = []
    with subscribe(topic, lambda e: seen.append(e.seq), via=client):
        thread.join(timeout=120)
        poll_for(lambda: len(seen) >= total, timeout=30, what=f"{total} events")
    assert seen == list(range(1, total + 1))


def test_clusters_we_start_leave_malloc_trim_unset_in_workers(client: Any) -> None:
    values = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert len(values) == 2
    assert set(values.values()) == {None}


def test_events_from_a_publisher_on_another_machine_arrive_without_a_journal(
    client: Any, unique_name: str
) -> None:
    """A publisher elsewhere journals on its own disk; here only Dask carries its events."""
    topic = run_topic(unique_name)
    remote = Event(topic=topic, kind="worker-lost", seq=1, time=0.0, data={"name": "far"})
    seen: list[Event] = []
    with subscribe(topic, seen.append, via=client):
        client.log_event(topic, {"ft-notebook-event": remote.to_dict()})
        poll_for(lambda: seen, timeout=15, what="the remote event")
    assert seen == [remote]
    assert history(topic) == []  # nothing in this machine's journal
    assert history(topic, via=client) == [remote]
