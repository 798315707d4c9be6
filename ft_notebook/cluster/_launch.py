"""Start a detached cluster, or fail cleanly: no half-started cluster, no orphan process.

Everything that can be wrong with the request (GPUs, worker count, interface,
ports, the data folder) is checked here, in the caller, before any process starts.
Then the daemon is started in a new session with a pipe to answer through, and
:func:`start_cluster` waits for its one line. On any failure, or when the answer is
late, the daemon's whole process group is SIGKILLed before the error is raised.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ft_notebook.cluster._certs import make_certificates
from ft_notebook.cluster._registry import ClusterInfo, Registry
from ft_notebook.cluster._resources import (
    discover_gpus,
    plan_workers,
    select_gpus,
    usable_cores,
)
from ft_notebook.cluster._spec import ClusterSpec, WorkerSpec
from ft_notebook.exceptions import ClusterError

#: Beyond the daemon's own start timeout: its interpreter start and imports.
_LAUNCH_SLACK_S = 30.0


@dataclass(frozen=True)
class StartRequest:
    """A cluster as the caller asked for it (``None``: from the configuration)."""

    name: str
    workers: int | None
    gpus: str | tuple[str, ...]
    idle_timeout_s: float
    port: int
    dashboard_port: int | None
    interface: str | None
    hung_after_s: float
    heartbeat_interval_s: float
    start_timeout_s: float
    worker_start: str = "forkserver"


def start_cluster(registry: Registry, request: StartRequest) -> ClusterInfo:
    """Start the cluster of ``request`` detached; return its registry entry once ready."""
    inventory = [] if request.gpus == "none" else discover_gpus()
    gpus = select_gpus(request.gpus, inventory, os.environ.get("CUDA_VISIBLE_DEVICES"))
    plan = plan_workers(request.workers, gpus, usable_cores())
    host = listen_host(request.interface)
    check_port_free(host, request.port, "scheduler port (ft-notebook.cluster.port)")
    if request.dashboard_port:
        check_port_free(host, request.dashboard_port, "dashboard port")
    folder = registry.cluster_dir(request.name)
    certs = make_certificates(
        folder,
        hosts=sorted({host, "127.0.0.1", "localhost"}),
        common_name=f"ft-notebook cluster {request.name}",
    )
    import psutil

    spec = ClusterSpec(
        name=request.name,
        folder=str(folder),
        data_dir=str(registry.root.parent),
        host=host,
        port=request.port,
        dashboard_port=request.dashboard_port,
        workers=tuple(
            WorkerSpec(s.name, s.gpu.uuid if s.gpu is not None else None) for s in plan.slots
        ),
        torch_threads=plan.torch_threads,
        memory_limit=int(psutil.virtual_memory().total // len(plan.slots)),
        idle_timeout_s=request.idle_timeout_s,
        hung_after_s=request.hung_after_s,
        heartbeat_interval_s=request.heartbeat_interval_s,
        start_timeout_s=request.start_timeout_s,
        certs=certs,
        worker_start=request.worker_start,
    )
    spec_path = folder / "spec.json"
    spec.dump(spec_path)
    return _spawn(spec, spec_path, plan.process_env())


def listen_host(interface: str | None) -> str:
    """The IP to listen on: loopback, or the configured interface's address."""
    if interface is None:
        return "127.0.0.1"
    from distributed.utils import get_ip_interface

    try:
        return str(get_ip_interface(interface))
    except ValueError as e:
        raise ClusterError(
            f"ft-notebook.cluster.interface is {interface!r}, which has no IPv4 address "
            f"here ({e}). Name an interface from `ip addr`, or set it to null to stay "
            f"on loopback."
        ) from e


def check_port_free(host: str, port: int, what: str) -> None:
    if port == 0:
        return
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Tornado does
        sock.bind((host, port))
    except OSError as e:
        why = "is already in use" if e.errno == errno.EADDRINUSE else f"cannot be used ({e})"
        raise ClusterError(
            f"The {what}: port {port} on {host} {why}. Pick another port, or 0 for a "
            f"free one; `ss -ltnp 'sport = :{port}'` shows who holds it."
        ) from e
    finally:
        sock.close()


def _spawn(spec: ClusterSpec, spec_path: Path, process_env: dict[str, str]) -> ClusterInfo:
    folder = Path(spec.folder)
    log_path = folder / "cluster.log"
    env = {**os.environ, **process_env, "DASK_FT_NOTEBOOK__DATA_DIR": spec.data_dir}
    read_fd, write_fd = os.pipe()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ft_notebook.cluster._daemon", str(spec_path), str(write_fd)],
            pass_fds=(write_fd,),
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            start_new_session=True,
            env=env,
            cwd=folder,
        )
    finally:
        os.close(write_fd)
        os.close(log_fd)
    group = proc.pid  # the new session's process group: the daemon and its workers
    try:
        proc.wait(timeout=30)  # the first process only forks and exits
        answer = _read_answer(read_fd, spec.start_timeout_s + _LAUNCH_SLACK_S)
    except BaseException:
        kill_group(group)
        raise
    finally:
        os.close(read_fd)
    if answer is not None and answer.get("ok"):
        return ClusterInfo.from_dict(answer["entry"])
    kill_group(group)
    if answer is None:
        why = "its process exited before it was ready"
    elif answer.get("timeout"):
        why = f"it was not ready within {spec.start_timeout_s + _LAUNCH_SLACK_S:g} s"
    else:
        why = str(answer.get("error"))
    raise ClusterError(
        f"Cluster {spec.name!r} did not start: {why}. Nothing of it was left running. "
        f"Its log {log_path} ends with:\n{_tail(log_path)}"
    )


def _read_answer(fd: int, timeout: float) -> dict[str, Any] | None:
    """The daemon's one JSON line; None at EOF; ``{"timeout": True}`` past the deadline."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            return {"ok": False, "timeout": True}
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    if b"\n" not in data:
        return None
    try:
        answer = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return {"ok": False, "error": f"an unreadable answer {data[:200]!r}"}
    return answer if isinstance(answer, dict) else None


def kill_group(group: int, timeout: float = 10.0) -> None:
    """SIGKILL every process of ``group`` and wait until none is left running."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)
    import psutil

    deadline = time.monotonic() + timeout
    delay = 0.01
    while time.monotonic() < deadline:
        alive = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(proc.pid) == group and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except (ProcessLookupError, psutil.NoSuchProcess):
                continue
        if not alive:
            return
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        time.sleep(delay)  # processes on their way out; back off to 0.2 s
        delay = min(delay * 2, 0.2)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in text[-lines:])
