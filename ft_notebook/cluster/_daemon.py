"""The detached process that is a private cluster: scheduler, nannies, idle shutdown.

Started by the launcher as ``python -m ft_notebook.cluster._daemon SPEC FD`` in a new
session with its output in the cluster's log file; it forks once more at once, so it
is nobody's child and outlives the process that started it (a kernel that crashes).
In one event loop it runs the TLS scheduler with the :class:`ControlPlane` plugin and
one nanny per worker; each nanny keeps a worker process (one thread, torch
preloaded) and restarts it when it dies. Worker processes exit by themselves if this
process dies, so a SIGKILL here leaves no orphan.

Guarantees:
- the launcher hears exactly one line on FD: ``{"ok": true, "entry": ...}`` once the
  scheduler and every worker are up and the registry entry is written, or
  ``{"ok": false, "error": ...}``, after which nothing of the cluster is left;
- the registry entry goes before the processes do, on every way out: idle timeout,
  SIGTERM, or a client's ``shutdown()``;
- the cluster shuts down once it has been idle (no client, no hold, no task) for the
  spec's idle timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ft_notebook.cluster._spec import ClusterSpec, WorkerSpec

logger = logging.getLogger("ft_notebook.cluster.daemon")


class _Ready:
    """The one-line answer to the launcher, through an inherited pipe."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    def send(self, message: dict[str, Any]) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            os.write(fd, (json.dumps(message) + "\n").encode())
        except OSError:  # the launcher gave up waiting; the registry still knows us
            logger.warning("the launcher is gone; the cluster runs on")
        finally:
            os.close(fd)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec_path, fd = Path(args[0]), int(args[1])
    if os.fork() > 0:  # the launcher reaps this parent; the child is reparented
        os._exit(0)
    os.umask(0o077)  # the scheduler file, scratch space and logs are the user's alone
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s"))
    logging.getLogger("ft_notebook").addHandler(handler)
    logging.getLogger("ft_notebook").setLevel(logging.INFO)
    ready = _Ready(fd)
    try:
        spec = ClusterSpec.load(spec_path)
        return asyncio.run(_serve(spec, ready))
    except BaseException as e:
        logger.exception("the cluster process failed")
        ready.send({"ok": False, "error": f"the cluster process failed: {e!r}"})
        return 1


_HEALTH, _STATICS = "distributed.http.health", "distributed.http.statics"


def collective_interface(host: str) -> dict[str, str]:
    """gloo and NCCL open their own sockets, on the interface of the machine's hostname
    unless told: tell them the cluster's (``lo`` on loopback), so that training follows
    the cluster's listening rule. What the user set already is left as it is."""
    import psutil

    names = [
        n for n, addrs in psutil.net_if_addrs().items() if any(a.address == host for a in addrs)
    ]
    if not names:
        return {}
    return {
        k: names[0] for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if k not in os.environ
    }


async def _serve(spec: ClusterSpec, ready: _Ready) -> int:
    import dask.config

    from ft_notebook.cluster import forkserver
    from ft_notebook.config import cluster_dask_config

    base = cluster_dask_config()  # imports distributed, which registers its defaults
    config = {
        **base,
        # let training code start DataLoader worker processes inside workers
        "distributed.worker.daemon": False,
        # The HTTP servers are plain HTTP that any local user can reach: beside the
        # dashboard only the health check, and no page with logs, call stacks,
        # exceptions or metrics (Dask's `info`, `json` and `prometheus` routes), nor
        # one that forwards requests to other hosts and ports (`proxy`)
        "distributed.scheduler.http.routes": [_HEALTH, _STATICS],
        "distributed.worker.http.routes": [_HEALTH, _STATICS],
        **forkserver.dask_config(spec.worker_start),
    }
    with dask.config.set(config):
        forkserver.preload_server(spec.worker_start)
        return await _Cluster(spec, ready).run()


class _Cluster:
    def __init__(self, spec: ClusterSpec, ready: _Ready) -> None:
        self.spec = spec
        self.ready = ready
        self.scheduler: Any = None
        self.nannies: list[Any] = []
        self.stop = asyncio.Event()
        self.reason = "unknown"

    async def run(self) -> int:
        from ft_notebook.cluster._registry import Registry

        registry = Registry(Path(self.spec.data_dir) / "clusters")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            await self._start()
            entry = self._entry()
            registry.write(entry)
        except BaseException as e:
            logger.exception("the cluster did not start")
            await self._close()
            self.ready.send({"ok": False, "error": _describe(e, self.spec)})
            return 1
        self.ready.send({"ok": True, "entry": entry.to_dict()})
        logger.info("cluster %s ready at %s", self.spec.name, self.scheduler.address)
        try:
            await self._serve_until_done(registry, entry)
        finally:
            registry.remove(self.spec.name, pid=os.getpid())
            logger.info("cluster %s shutting down: %s", self.spec.name, self.reason)
            await self._close()
        return 0

    def _on_signal(self, sig: int) -> None:
        self.reason = f"signal {signal.Signals(sig).name}"
        self.stop.set()

    async def _start(self) -> None:
        from distributed import Scheduler
        from distributed.protocol.pickle import dumps

        from ft_notebook.cluster._control import ControlPlane
        from ft_notebook.cluster._health import HealthPlugin

        spec, folder = self.spec, Path(self.spec.folder)
        security = spec.security()
        self.scheduler = Scheduler(
            host=spec.host,
            port=spec.port,
            protocol="tls",
            security=security,
            dashboard=spec.dashboard_port is not None,
            dashboard_address=f"{spec.host}:{spec.dashboard_port or 0}",
            scheduler_file=str(folder / "scheduler.json"),
            plugins=[ControlPlane(hung_after_s=spec.hung_after_s)],
            idle_timeout=None,
        )
        await self.scheduler
        health = HealthPlugin()
        await self.scheduler.register_worker_plugin(
            None, dumps(health), name=health.name, idempotent=True
        )
        self.nannies = [make_nanny(spec, w, self.scheduler.address) for w in spec.workers]
        await asyncio.wait_for(
            asyncio.gather(*(n.start() for n in self.nannies)), timeout=spec.start_timeout_s
        )

    def _entry(self) -> Any:
        import psutil

        from ft_notebook.cluster._registry import ClusterInfo

        s, spec = self.scheduler, self.spec
        dashboard = None
        if spec.dashboard_port is not None and "dashboard" in s.services:
            dashboard = f"http://{spec.host}:{s.services['dashboard'].port}/status"
        return ClusterInfo(
            name=spec.name,
            address=s.address,
            pid=os.getpid(),
            pid_started=psutil.Process().create_time(),
            started=time.time(),
            owner_uid=os.getuid(),
            certs=spec.certs,
            log=str(Path(spec.folder) / "cluster.log"),
            dashboard=dashboard,
            scheduler_file=str(Path(spec.folder) / "scheduler.json"),
            workers=self._worker_pids(),
            gpus=spec.gpus,
            version=_version(),
        )

    def _worker_pids(self) -> dict[str, int]:
        return {str(ws.name): int(ws.pid) for ws in self.scheduler.workers.values() if ws.pid}

    async def _serve_until_done(self, registry: Any, entry: Any) -> None:
        from dataclasses import replace

        from distributed.core import Status

        from ft_notebook.cluster._control import control_plane

        plane = control_plane(self.scheduler)
        idle_timeout = self.spec.idle_timeout_s
        tick = min(1.0, idle_timeout / 4)
        idle_since: float | None = None
        while not self.stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), tick)
            if self.scheduler.status not in (Status.running, Status.starting):
                self.reason = "the scheduler closed (shutdown by a client)"
                return
            now = time.monotonic()
            if plane.busy_reasons():
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= idle_timeout:
                self.reason = f"idle for {idle_timeout:g} s"
                return
            pids = self._worker_pids()
            if pids and pids != entry.workers:
                entry = replace(entry, workers=pids)
                registry.write(entry)

    async def _close(self) -> None:
        # Workers first, each by its nanny, while the scheduler still answers them;
        # the control plane knows this is a shutdown, not a fault.
        if self.scheduler is not None:
            from ft_notebook.cluster._control import PLUGIN_NAME

            plane = self.scheduler.plugins.get(PLUGIN_NAME)
            if plane is not None:
                plane.closing = True
        await asyncio.gather(*(n.close(timeout=10) for n in self.nannies), return_exceptions=True)
        if self.scheduler is not None:
            with contextlib.suppress(Exception):
                await self.scheduler.close(reason=f"ft-notebook: {self.reason}")
        _kill_children()


def make_nanny(spec: ClusterSpec, worker: WorkerSpec, scheduler_address: str) -> Any:
    """The nanny of ``worker`` as this cluster runs its workers (also for workers added
    by scaling, see ._scale); not started yet."""
    from distributed import Nanny

    return Nanny(
        scheduler_address,
        nthreads=1,
        name=worker.name,
        security=spec.security(),
        host=spec.host,
        env={**worker.env(), **collective_interface(spec.host)},
        preload=list(spec.preload),
        memory_limit=spec.memory_limit,
        local_directory=str(Path(spec.folder) / "work"),
        resources={"GPU": 1} if worker.gpu else None,
        heartbeat_interval=f"{spec.heartbeat_interval_s}s",
        silence_logs=False,
    )


def _version() -> str:
    # not ``ft_notebook.__version__``: the package root imports every layer
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ft-notebook")
    except PackageNotFoundError:
        return ""


def _kill_children() -> None:
    """Last resort: no worker process outlives the cluster."""
    import psutil

    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(children, timeout=5)


def _describe(error: BaseException, spec: ClusterSpec) -> str:
    text = f"{type(error).__name__}: {error}"
    cause: BaseException | None = error
    while cause is not None:  # Dask wraps the bind error in "Scheduler failed to start"
        if isinstance(cause, OSError) and "address already in use" in str(cause).lower():
            return f"port {spec.port} on {spec.host} is already in use ({cause})"
        cause = cause.__cause__ or cause.__context__
    if isinstance(error, asyncio.TimeoutError):
        return (
            f"the workers did not all start within {spec.start_timeout_s:g} s "
            f"(ft-notebook.cluster.start-timeout)"
        )
    return text


if __name__ == "__main__":
    raise SystemExit(main())
