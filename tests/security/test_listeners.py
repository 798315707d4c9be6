"""Issue 36, items 1 and 2: another user on the machine can neither use the cluster's
rendezvous nor take its workers down through the listeners its process groups open.

The cluster is a real detached one (TLS, loopback), started under a soft limit of
1,024 open files, the default of most Linux distributions (the hard limit stays as
it is); the attacker is a second Unix user made for the session (see conftest).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import resource
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _attack import Attacker, User, listening, reachable
from distributed import Client

from ft_notebook.cluster import clusters
from ft_notebook.events import RunState, history, run_topic
from ft_notebook.testing import poll_for, private_cluster
from ft_notebook.testing.training import counting_problem
from ft_notebook.train import fit

pytestmark = pytest.mark.integration

#: Connections the flood makes (the issue: 500 took a worker from 203 to 829 fds).
FLOOD = 3000


#: The ports the workers listened on before any run (Dask's own), per cluster.
_FRESH: dict[str, set[tuple[str, int]]] = {}


@pytest.fixture(scope="module")
def cluster(mallory: User) -> Iterator[Client]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        with private_cluster("t-sec", workers=2) as client:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            _FRESH[client.scheduler.address] = set(listening(_workers(client)))  # type: ignore[union-attr]
            yield client
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _workers(client: Client) -> dict[int, str]:
    return {pid: f"worker {a}" for a, pid in client.run(os.getpid).items()}


def _pids(client: Client) -> dict[int, str]:
    """Every process of the cluster: scheduler, nannies, workers (pid -> role)."""
    [entry] = [c for c in clusters() if c.address == client.scheduler.address]  # type: ignore[union-attr]
    nannies = {pid: f"nanny {a}" for a, pid in client.run(os.getpid, nanny=True).items()}
    return {entry.pid: "scheduler", **nannies, **_workers(client)}


def _training(client: Client, name: str, store: Path, epochs: int = 1000) -> Any:
    """A run of both workers, past its first steps (its groups formed)."""
    run = fit(
        epochs=epochs,
        cluster=client,
        name=name,
        store=str(store),
        wait=False,
        **counting_problem(delay_s=0.02),
    )
    poll_for(lambda: (run.info()["step"] or 0) >= 4, timeout=120, what="a run training")
    return run


# ---- what the attacker does (in its own process, as the other user)


def _try_store_clients(
    report: Callable[[Any], None], released: Callable[[], None], ports: list[list[Any]]
) -> list[list[Any]]:
    """A raw TCPStore client on every port: what it could read or write."""
    import threading

    import torch.distributed as dist

    found: list[list[Any]] = []

    def attempt(host: str, port: int) -> None:
        try:
            store = dist.TCPStore(  # type: ignore[attr-defined]
                host, port, None, False, timeout=datetime.timedelta(seconds=2)
            )
        except Exception:
            return
        for what, act in (
            ("wrote a key", lambda: store.set("mallory", "was here")),
            ("counted keys", store.num_keys),
            ("listed keys", store.list_keys),
            ("read a key", lambda: store.get("mallory")),
        ):
            with contextlib.suppress(Exception):
                found.append([host, port, what, repr(act())[:200]])

    # a listener that takes the connection and never answers holds its thread: such
    # ports gave nothing, and the attacker does not wait for them past a deadline
    threads = [threading.Thread(target=attempt, args=(h, p), daemon=True) for h, p in ports]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return list(found)


#: What Dask's HTTP servers can serve: its dashboard, its pages and JSON, metrics.
#: (Each one's health check, a sitemap listing it and Dask's own static files stay:
#: public, and nothing of this cluster in them.)
_PAGES = (
    "/",
    "/status",
    "/workers",
    "/individual-task-stream",
    "/info/main/workers.html",
    "/info/main/logs.html",
    "/json/identity.json",
    "/json/counts.json",
    "/metrics",
)


def _read_pages(
    report: Callable[[Any], None], released: Callable[[], None], ports: list[list[Any]]
) -> list[list[Any]]:
    """An HTTP GET of each of Dask's pages on every port: what answered with content."""
    import urllib.error
    import urllib.request

    found: list[list[Any]] = []
    for host, port in ports:
        for page in _PAGES:
            try:
                with urllib.request.urlopen(f"http://{host}:{port}{page}", timeout=1) as r:
                    body = r.read(300)
            except (urllib.error.URLError, OSError, ValueError):
                continue  # refused, not HTTP (TLS, gloo), or an error status
            found.append([host, port, page, body[:120].decode(errors="replace")])
    return found


def _flood(
    report: Callable[[Any], None], released: Callable[[], None], ports: list[list[Any]], n: int
) -> int:
    """``n`` connections spread over ``ports``, each sending a few bytes, all kept
    open until the test releases them; reports how many were made."""
    held = []
    for i in range(n):
        host, port = ports[i % len(ports)]
        try:
            s = socket.create_connection((host, port), timeout=2)
            s.sendall(os.urandom(16))
            held.append(s)
        except OSError:
            pass
    report(len(held))
    released()
    for s in held:
        s.close()
    return len(held)


# ---- the tests


def test_no_port_of_the_cluster_gives_another_user_a_store_key(
    cluster: Client, mallory: User, tmp_path: Path, unique_name: str
) -> None:
    """The rendezvous was a TCPStore in the scheduler that anyone could read, write and
    fill. Now no listening port of the scheduler, the nannies or the workers (gloo's
    listeners included) lets a raw TCPStore client read or write a key."""
    run = _training(cluster, unique_name, tmp_path)
    try:
        ports = listening(_pids(cluster))
        assert len(ports) >= 4  # scheduler, two workers, their groups' listeners
        targets = [[reachable(ip), port] for ip, port in ports]
        with Attacker(mallory, _try_store_clients, targets) as attacker:
            found = attacker.next_report(timeout=120)
        assert found == [], f"another user used these ports as a store: {found}"
        step = run.info()["step"]
        poll_for(lambda: run.info()["step"] > step, timeout=60, what="the run going on")
    finally:
        run.cancel()


def test_another_user_reads_no_page_of_the_cluster(cluster: Client, mallory: User) -> None:
    """Dask's dashboard is plain HTTP without a login: any local user read the workers'
    names, TLS addresses, memory and task stream from it. It is off by default now, and
    no port of the scheduler, nannies or workers serves another user one of Dask's
    pages (the workers' HTTP servers keep their health check)."""
    [entry] = [c for c in clusters() if c.address == cluster.scheduler.address]  # type: ignore[union-attr]
    assert entry.dashboard is None
    ports = listening(_pids(cluster))
    assert len(ports) >= 3  # the scheduler and two workers at least
    targets = [[reachable(ip), port] for ip, port in ports]
    with Attacker(mallory, _read_pages, targets) as attacker:
        found = attacker.next_report(timeout=120)
    assert found == [], f"another user read these pages: {found}"


def test_a_connect_flood_from_another_user_costs_no_worker(
    cluster: Client, mallory: User, tmp_path: Path, unique_name: str
) -> None:
    """Connections to a gloo listener are kept while its group lives; 2,000 of them
    from any local user took a worker past its file limit and gloo aborted it. Now a
    flood of every worker's ports while a run trains costs no worker, and the run
    goes on and completes."""
    workers = _workers(cluster)
    run = _training(cluster, unique_name, tmp_path, epochs=60)  # 480 steps: 10 s or more
    targets = [[reachable(ip), port] for ip, port in listening(workers)]
    with Attacker(mallory, _flood, targets, FLOOD) as attacker:
        made = attacker.next_report(timeout=180)
        assert made >= 2000, f"the flood made only {made} connections"
        info = run.info()
        assert info["state"] == RunState.RUNNING.value, (
            f"the run is {info['state']} with the flood in (a run too short for the "
            f"flood, or a worker lost: {sorted(workers)} then {sorted(_workers(cluster))})"
        )
        step = info["step"]
        poll_for(lambda: run.info()["step"] >= step + 8, timeout=60, what="steps under flood")
    run.wait(timeout=180)
    assert run.info()["state"] == RunState.COMPLETED.value
    assert _workers(cluster) == workers  # the same processes: none died, none restarted
    lost = [e for e in history(run_topic(unique_name)) if e.kind == "worker-lost"]
    assert lost == []


def test_runs_that_ended_leave_no_listener_on_the_workers(
    cluster: Client, tmp_path: Path, unique_name: str
) -> None:
    """Every ft.fit left its groups' gloo listeners open on each worker (6 per worker
    after 3 runs), each accepting anyone. Now a run's groups go when it ends, whether
    it completed or was cancelled while its ranks were inside a collective."""
    workers = _workers(cluster)
    for i in range(2):
        fit(
            epochs=2,
            cluster=cluster,
            name=f"{unique_name}-{i}",
            store=str(tmp_path),
            timeout=120,
            **counting_problem(),
        )
    _training(cluster, f"{unique_name}-cancelled", tmp_path).cancel()
    fresh = _FRESH[cluster.scheduler.address]  # type: ignore[union-attr]
    poll_for(
        lambda: set(listening(workers)) == fresh,
        timeout=20,
        what=f"the workers' listeners back to Dask's own {sorted(fresh)}",
    )
