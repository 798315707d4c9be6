"""A private cluster with real processes: detached, TLS-only, found again, attachable."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import dask.config
import psutil
import pytest
from distributed import Client

from ft_notebook.cluster import (
    ClusterInfo,
    attach,
    cluster,
    clusters,
    down,
    hold,
    release,
    rendezvous_address,
    status,
)
from ft_notebook.cluster._certs import make_certificates
from ft_notebook.cluster._spec import cluster_security
from ft_notebook.config import reload_config
from ft_notebook.testing import poll_for, private_cluster

# The detached workers cannot import this test module: client.run sends its functions
# by value, as Dask does for functions defined in a notebook. (A task graph is pickled
# whole, by reference: tasks here call importable functions only.)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _name(kind: str) -> str:
    return f"t-{kind}-{uuid.uuid4().hex[:6]}"


def _entry(name: str) -> ClusterInfo:
    return next(c for c in clusters() if c.name == name)


@pytest.fixture(scope="module")
def private() -> Iterator[Client]:
    with private_cluster("t-life", dashboard=True) as client:  # off by default
        yield client


@pytest.fixture(scope="module")
def info(private: Client) -> ClusterInfo:
    return next(c for c in clusters() if c.address == private.scheduler.address)


def _listening(pids: list[int]) -> set[str]:
    ips = set()
    for pid in pids:
        for conn in psutil.Process(pid).net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                ips.add(conn.laddr.ip)
    return ips


def test_it_runs_detached_on_loopback_with_its_output_in_its_log(
    private: Client, info: ClusterInfo
) -> None:
    daemon = psutil.Process(info.pid)
    assert os.getsid(info.pid) != os.getsid(0)  # a session of its own
    assert daemon.ppid() != os.getpid()  # nobody's child: it outlives its starter
    # its children: the fork server (torch imported once) and multiprocessing's
    # resource tracker; the workers are forks of the server
    servers = [c for c in daemon.children() if "forkserver" in " ".join(c.cmdline())]
    assert len(servers) == 1, [c.cmdline() for c in daemon.children()]
    assert sorted(info.workers) == ["cpu0", "cpu1"]
    assert {w.pid for w in servers[0].children()} == set(info.workers.values())
    for pid in [info.pid, servers[0].pid, *info.workers.values()]:
        assert os.readlink(f"/proc/{pid}/fd/1") == info.log  # never our stdout
        assert os.readlink(f"/proc/{pid}/fd/2") == info.log
    assert _listening([info.pid, *info.workers.values()]) == {"127.0.0.1"}
    assert info.address.startswith("tls://127.0.0.1:")
    assert info.dashboard is not None
    assert info.dashboard.startswith("http://127.0.0.1:")
    assert info.owner_uid == os.getuid()
    folder = Path(info.certs.key).parent
    assert folder.stat().st_mode & 0o777 == 0o700
    assert Path(info.certs.key).stat().st_mode & 0o777 == 0o600
    for made_by_dask in (info.scheduler_file, info.log):
        assert made_by_dask is not None
        assert Path(made_by_dask).stat().st_mode & 0o077 == 0  # the owner's alone


def test_its_http_pages_show_other_users_no_logs_stacks_or_metrics(
    private: Client, info: ClusterInfo
) -> None:
    """The dashboard's HTTP server has no login: beside the dashboard it serves only the
    health check (Dask's defaults add worker logs, call stacks, tracebacks, metrics)."""
    assert info.dashboard is not None
    base = info.dashboard.rstrip("/").removesuffix("/status")
    with urllib.request.urlopen(f"{base}/health", timeout=10) as ok:
        assert ok.read() == b"ok"
    workers = private.run(lambda dask_worker: dask_worker.http_server.port)
    pages = [
        f"{base}/info/main/logs.html",
        f"{base}/info/main/workers.html",
        f"{base}/json/identity.json",
        f"{base}/metrics",
        *(f"http://127.0.0.1:{port}/metrics" for port in workers.values()),
    ]
    for page in pages:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(page, timeout=10)
        refused.value.close()
        assert refused.value.code == 404, page


def _worker_setup(dask_worker: Any) -> dict[str, Any]:
    import sys

    import torch

    return {
        "torch_preloaded": "torch" in sys.modules,
        "torch_threads": torch.get_num_threads(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
        "malloc_trim": os.environ.get("MALLOC_TRIM_THRESHOLD_"),
        "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nthreads": dask_worker.state.nthreads,
        # gloo's and NCCL's own sockets: on the cluster's interface, not the hostname's
        "collectives_on": (
            os.environ.get("GLOO_SOCKET_IFNAME"),
            os.environ.get("NCCL_SOCKET_IFNAME"),
        ),
    }


def test_workers_have_one_thread_torch_preloaded_and_pinned_threads(private: Client) -> None:
    cores = len(os.sched_getaffinity(0))
    expected = max(1, cores // 2)
    seen = private.run(_worker_setup)
    assert len(seen) == 2
    for worker in seen.values():
        assert worker == {
            "torch_preloaded": True,
            "torch_threads": expected,
            "omp": str(expected),
            "malloc_trim": None,
            "cuda_visible": "",  # CPU workers see no GPU
            "nthreads": 1,
            "collectives_on": ("lo", "lo"),
        }


def test_a_client_without_the_certificate_is_refused(
    private: Client, info: ClusterInfo, tmp_path: Path
) -> None:
    host, port = info.address.removeprefix("tls://").rsplit(":", 1)
    # 1. plain TCP: the scheduler answers nothing and closes
    with socket.create_connection((host, int(port)), timeout=10) as plain:
        plain.sendall(b"\x00" * 64)
        assert _closed_without_answer(plain)
    # 2. TLS that trusts the cluster's CA but shows no certificate of its own
    ctx = ssl.create_default_context(cafile=str(info.certs.ca))
    ctx.check_hostname = False
    assert _tls_refused(ctx, host, int(port))
    # 3. a Dask client with a certificate from another CA (another cluster, another user)
    other = make_certificates(tmp_path, ["127.0.0.1"], "intruder")
    foreign = cluster_security(other)
    foreign.tls_ca_file = str(info.certs.ca)  # it even trusts the cluster: still refused
    with pytest.raises((OSError, TimeoutError)):
        Client(info.address, security=foreign, timeout="2s", set_as_default=False)
    assert private.submit(sum, [1, 2], pure=False).result() == 3  # and it still serves us


def _tls_refused(ctx: ssl.SSLContext, host: str, port: int) -> bool:
    try:
        with ctx.wrap_socket(socket.create_connection((host, port), timeout=10)) as s:
            # TLS 1.3 completes the client's side of the handshake before the server
            # has checked the client: the refusal comes as an alert or a closed socket
            with contextlib.suppress(ssl.SSLError, ConnectionError):
                s.sendall(b"\x00" * 64)
            return _closed_without_answer(s)
    except (ssl.SSLError, ConnectionError):
        return True  # refused during the handshake itself


def _closed_without_answer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1024) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


def test_attach_by_address_scheduler_file_or_client_installs_plugins_once(
    private: Client, info: ClusterInfo
) -> None:
    assert info.scheduler_file is not None
    for target in (info.scheduler_file, info.address, info.name):
        with attach(target, set_as_default=False) as other:
            assert other.submit(sum, [2, 2], pure=False).result() == 4
    assert attach(private) is private
    plugins = private.run_on_scheduler(
        lambda dask_scheduler: sorted(p for p in dask_scheduler.plugins if "ft-notebook" in p)
    )
    assert plugins == ["ft-notebook-control"]
    health = private.run(lambda dask_worker: sorted(dask_worker.plugins))
    assert all("ft-notebook-health" in p for p in health.values())


def test_any_dask_cluster_gets_the_plugins_and_is_never_shut_down_by_us(cluster: Any) -> None:
    before = {c.name for c in clusters()}
    with attach(cluster.scheduler_address, set_as_default=False) as client:
        poll_for(lambda: len(status(client)) == 2, timeout=30, what="2 workers in status")
        rows = status(client)
        assert {r.state for r in rows} == {"running"}
        assert all(r.rss and r.rss > 0 for r in rows)
        attach(client)  # again: still one control plane
        assert "ft-notebook-control" in client.run_on_scheduler(
            lambda dask_scheduler: list(dask_scheduler.plugins)
        )
    assert {c.name for c in clusters()} == before  # attaching registers nothing
    assert not down("default")  # and down() knows only clusters we started
    assert cluster.status.name == "running"
    with Client(cluster, set_as_default=False) as again:
        assert len(again.scheduler_info()["workers"]) == 2


async def _store_set(dask_worker: Any) -> bool:
    import asyncio

    from ft_notebook.train.rank._store import ClusterStore

    # a rank calls its store from its own thread, never from the worker's event loop
    store = ClusterStore(dask_worker, timeout_s=30)
    await asyncio.to_thread(store.set, "rank0/address", "10.0.0.1:29500")
    return True


async def _store_get(dask_worker: Any) -> str:
    import asyncio

    from ft_notebook.train.rank._store import ClusterStore

    store = ClusterStore(dask_worker, timeout_s=30)
    return (await asyncio.to_thread(store.get, "rank0/address")).decode()


def test_status_holds_and_the_rendezvous_store(private: Client, info: ClusterInfo) -> None:
    rows = status(private)
    assert [(r.name, r.state, r.restarts) for r in rows] == [
        ("cpu0", "running", 0),
        ("cpu1", "running", 0),
    ]
    assert all(r.rss and r.memory_limit and r.heartbeat_age_s is not None for r in rows)
    assert hold(private, "run:demo") == ["run:demo"]
    assert release(private, "run:demo") == []
    listening_before = _ports_listening(info.pid)
    host, port = rendezvous_address(private)
    assert (host, port) == ("127.0.0.1", 0)  # no port: the store is behind the scheduler's
    address = {r.name: r.address for r in rows}
    assert private.run(_store_set, workers=[address["cpu0"]])
    got = private.run(_store_get, workers=[address["cpu1"]])
    assert got == {address["cpu1"]: "10.0.0.1:29500"}
    assert _ports_listening(info.pid) == listening_before  # the store opened no listener


def _ports_listening(pid: int) -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }


def test_two_data_folders_are_two_users_that_never_see_each_other(
    private: Client, info: ClusterInfo, tmp_path: Path
) -> None:
    other_home = tmp_path / "other-user"
    name = _name("other")
    try:
        with dask.config.set({"ft-notebook.data-dir": str(other_home)}):
            reload_config()
            theirs = cluster(name=name, workers=1, set_as_default=False)
            try:
                their_info = _entry(name)
                assert [c.name for c in clusters()] == [name]  # ours is not there
                assert Path(their_info.log).is_relative_to(other_home)
                # and our certificate does not open their cluster
                with pytest.raises((OSError, TimeoutError)):
                    Client(
                        their_info.address,
                        security=cluster_security(info.certs),
                        timeout="2s",
                        set_as_default=False,
                    )
            finally:
                theirs.close()
                down(name)
    finally:
        reload_config()
    assert name not in {c.name for c in clusters()}
    assert info.name in {c.name for c in clusters()}


def test_the_console_command_lists_and_shows_it(
    private: Client, info: ClusterInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    from ft_notebook.cli import main

    assert main(["cluster", "list"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith(info.name)]
    assert len(listed) == 1
    assert info.address in listed[0]
    assert "2 workers" in listed[0]
    assert main(["cluster", "status", "--name", info.name]) == 0
    out = capsys.readouterr().out
    assert f"at {info.address} (pid {info.pid})" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("worker"))
    rows = [line.split()[:2] for line in lines[header + 2 : header + 4]]
    assert rows == [["cpu0", "running"], ["cpu1", "running"]]
