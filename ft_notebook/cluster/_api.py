"""The user's entry points: get a client to a private cluster, attach, list, stop.

:func:`cluster` is what a notebook calls: it finds the user's cluster of that name in
the registry, or starts it detached, and returns a connected ``Client``. Finding and
starting happen under the cluster's start lock, so two kernels asking at once get
one cluster. :func:`attach` connects to any Dask cluster (address, scheduler file or
``Client``) and installs our plugins on it; :func:`down` stops only clusters we
started, never one we merely attached to.

Importing this module loads neither Dask nor torch; calling into it does.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import warnings
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ft_notebook.exceptions import ClusterError, ClusterUnreachable

if TYPE_CHECKING:
    from distributed import Client
    from distributed.security import Security

    from ft_notebook.cluster._registry import ClusterInfo, Registry


#: Every Client this process made to a cluster, so that :func:`down` can close them
#: first: a client left open tries to reconnect for 15 s, then logs an ERROR under
#: whatever cell ran last (issue 38).
_CLIENTS: weakref.WeakSet[Client] = weakref.WeakSet()


def _registry() -> Registry:
    # loaded on first use: `import ft_notebook` (and so every %ft restore) need not
    # pay for the registry and certificate modules
    from ft_notebook.cluster._registry import Registry

    return Registry.default()


def cluster(
    address: Any = None,
    *,
    name: str = "default",
    workers: int | None = None,
    gpus: Any = None,
    idle_timeout: str | float | None = None,
    port: int | None = None,
    security: Security | None = None,
    start: bool = True,
    set_as_default: bool = True,
) -> Client:
    """A Client to the user's private cluster ``name``, started on first use.

    The cluster runs detached (it outlives this process), on loopback unless
    ``ft-notebook.cluster.interface`` says otherwise, with TLS certificates made for
    it, one worker per GPU (``gpus=``, within ``CUDA_VISIBLE_DEVICES``) or
    ``workers`` CPU workers, and shuts down after ``idle_timeout`` unused. Options
    default to the ``ft-notebook.cluster`` configuration and only matter when the
    cluster starts. With ``address`` (an address, scheduler file or Client), attach
    to that cluster instead; see :func:`attach`.

    Raises:
        ClusterError: the cluster could not be started (the message says why).
        ClusterUnreachable: it is registered and running but does not answer.
    """
    if address is not None:
        return attach(address, security=security, set_as_default=set_as_default)
    request = _request(
        name,
        workers=workers,
        gpus=None if gpus is None else _gpus_argument(gpus),
        idle_timeout=idle_timeout,
        port=port,
    )
    registry = _registry()
    for attempt in range(2):
        with registry.starting(name, timeout=request.start_timeout_s + 60):
            info = registry.get(name)
            if info is None:
                if not start:
                    raise ClusterError(
                        f"No cluster named {name!r} runs for you "
                        f"(registry {registry.root}). Call cluster(name={name!r}) or "
                        f"run `ft-notebook cluster up --name {name}` to start one."
                    )
                from ft_notebook.cluster._launch import start_cluster

                info = start_cluster(registry, request)
            elif differences := _differences(info, workers=workers, gpus=gpus, port=port):
                # a cluster left running that already is what was asked (a notebook
                # run again) is simply used; only a real difference is worth a word
                warnings.warn(
                    f"Cluster {name!r} is already running, so {'; '.join(differences)}. "
                    f"Stop it with ft_notebook.cluster.down({name!r}) to start it anew "
                    f"with them.",
                    RuntimeWarning,
                    stacklevel=2,
                )
            try:
                return connect(info, set_as_default=set_as_default)
            except ClusterUnreachable:
                if attempt or info.alive():
                    raise
        # it shut down (idle) between the registry read and the connect: start anew
    raise AssertionError("unreachable")


def _differences(
    info: ClusterInfo, *, workers: int | None, gpus: Any, port: int | None
) -> list[str]:
    """What a running cluster lacks of ``workers=``, ``gpus=`` and ``port=``, in words."""
    found = []
    wanted_gpus = None if gpus is None else _gpus_argument(gpus)
    if workers is not None and not info.gpus and len(info.workers) != workers:
        found.append(f"workers={workers} was not used (it has {len(info.workers)})")
    if wanted_gpus == "none" and info.gpus:
        found.append(f"gpus='none' was not used (it has GPUs {list(info.gpus)})")
    elif isinstance(wanted_gpus, tuple) and len(wanted_gpus) != len(info.gpus):
        found.append(f"gpus={gpus!r} was not used (it has GPUs {list(info.gpus)})")
    if port is not None and not info.address.endswith(f":{port}"):
        found.append(f"port={port} was not used (it listens at {info.address})")
    return found


def _gpus_argument(gpus: Any) -> str | tuple[str, ...]:
    from ft_notebook.config import parse_gpus
    from ft_notebook.exceptions import ConfigError

    try:
        return parse_gpus(gpus)
    except ConfigError:
        raise ClusterError(
            f"gpus={gpus!r} names no GPUs: pass 'auto', 'none', 'all', a GPU index, or "
            f"a list of nvidia-smi indices or GPU UUIDs, e.g. gpus=[0, 2]."
        ) from None


def _request(
    name: str,
    *,
    workers: int | None,
    gpus: str | tuple[str, ...] | None,
    idle_timeout: str | float | None,
    port: int | None,
) -> Any:
    from dask.utils import parse_timedelta

    from ft_notebook._paths import checked_name
    from ft_notebook.cluster._launch import StartRequest
    from ft_notebook.config import get_config

    cfg = get_config().cluster
    try:
        idle = cfg.idle_timeout_s if idle_timeout is None else parse_timedelta(idle_timeout, "s")
    except (TypeError, ValueError, KeyError):
        idle = None
    if not idle or idle <= 0:
        raise ClusterError(
            f"idle_timeout={idle_timeout!r} is not a positive duration; pass seconds or "
            f"a string such as '30 minutes'."
        )
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ClusterError(f"workers={workers!r} must be a whole number of 1 or more.")
    return StartRequest(
        name=checked_name(name, "cluster name"),
        workers=workers if workers is not None else cfg.workers,
        gpus=gpus if gpus is not None else cfg.gpus,
        idle_timeout_s=float(idle),
        port=cfg.port if port is None else int(port),
        dashboard_port=cfg.dashboard_port,
        interface=cfg.interface,
        hung_after_s=cfg.hung_after_s,
        heartbeat_interval_s=cfg.heartbeat_interval_s,
        start_timeout_s=cfg.start_timeout_s,
        worker_start=cfg.worker_start,
    )


def connect(info: ClusterInfo, *, set_as_default: bool = True) -> Client:
    """A Client to a cluster of the registry, with its certificate."""
    from distributed import Client

    from ft_notebook.cluster._spec import cluster_security

    timeout = _connect_timeout()
    if not info.certs.exist():
        raise ClusterUnreachable(
            f"Cluster {info.name!r} at {info.address} (pid {info.pid}) is registered, "
            f"but its certificates in {info.certs.ca.parent} are gone, so no client "
            f"can connect. Stop it with `ft-notebook cluster down {info.name}` and "
            f"start it again."
        )
    try:
        client = Client(
            info.address,
            security=cluster_security(info.certs),
            timeout=timeout,
            set_as_default=set_as_default,
        )
    except (OSError, TimeoutError) as e:
        raise ClusterUnreachable(
            f"Cluster {info.name!r} is registered at {info.address} and its process "
            f"{info.pid} is {'alive' if info.alive() else 'gone'}, but its scheduler "
            f"did not answer within {timeout:g} s ({e}). It may be hung or "
            f"overloaded: see its log {info.log}, or stop it with "
            f"`ft-notebook cluster down {info.name}` and start it again."
        ) from e
    _CLIENTS.add(client)
    return client


def attach(target: Any, *, security: Security | None = None, set_as_default: bool = True) -> Client:
    """A Client to an existing cluster, with ft_notebook's plugins installed on it.

    ``target`` is a ``Client`` (returned as is), a scheduler file (JSON with an
    ``address``), a scheduler address, or the name of one of your clusters. A TLS
    cluster of your registry is reached with its own certificate; any other needs
    ``security=``. Attaching never makes us responsible for the cluster: :func:`down`
    does not stop what we did not start.
    """
    from distributed import Client

    if isinstance(target, Client):
        install_plugins(target)
        return target
    target = os.fspath(target) if isinstance(target, os.PathLike) else target
    if not isinstance(target, str):
        raise ClusterError(
            f"attach() takes a Client, a scheduler address, a scheduler file or a "
            f"cluster name; got {type(target).__name__} {target!r}."
        )
    address = target
    if "://" not in target and ":" not in target and not Path(target).is_file():
        info = _registry().get(target)
        if info is None:
            raise ClusterError(
                f"{target!r} is neither a scheduler address, nor a scheduler file, nor "
                f"one of your clusters ({[c.name for c in clusters()]})."
            )
        return connect(info, set_as_default=set_as_default)
    if Path(target).is_file():
        address = _scheduler_file_address(Path(target))
    if security is None:
        mine = next((c for c in clusters() if c.address == address), None)
        if mine is not None:
            return connect(mine, set_as_default=set_as_default)
    timeout = _connect_timeout()
    try:
        client = Client(address, security=security, timeout=timeout, set_as_default=set_as_default)
    except (OSError, TimeoutError, TypeError) as e:
        raise ClusterUnreachable(
            f"No Dask scheduler answered at {address} within {timeout:g} s "
            f"({type(e).__name__}: {e}). Check the address; a tls:// cluster needs "
            f"security= with its certificates."
        ) from e
    install_plugins(client)
    return client


def _connect_timeout() -> float:
    from ft_notebook.config import get_config

    return get_config().cluster.connect_timeout_s


def _scheduler_file_address(path: Path) -> str:
    try:
        address = json.loads(path.read_text())["address"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ClusterError(
            f"{path} is not a Dask scheduler file (JSON with an 'address'): {e!r}."
        ) from e
    return str(address)


def install_plugins(client: Client) -> None:
    """Install the control plane, health and restart-preload plugins (a no-op where
    they are)."""
    from ft_notebook.cluster._control import ControlPlane
    from ft_notebook.cluster._health import HealthPlugin
    from ft_notebook.cluster._restarts import PreloadOnRestart

    try:
        client.register_plugin(ControlPlane())
        client.register_plugin(HealthPlugin())
        client.register_plugin(PreloadOnRestart())
    except Exception as e:
        raise ClusterError(
            f"Could not install ft_notebook's plugins on the cluster at "
            f"{getattr(client.scheduler, 'address', '?')}: {type(e).__name__}: {e}. Its "
            f"scheduler and workers need ft_notebook installed (same version as here)."
        ) from e


def client_for(target: Any) -> Client:
    """The Client a feature (fit, serve) uses for its ``cluster=``: a Client, a scheduler
    address or file, or a cluster name, with the plugins installed; by default this
    process's default Client when it is connected to one of your clusters (so that
    calls do not open a new connection each), else your own cluster."""
    from distributed import Client

    if isinstance(target, Client):
        return attach(target)
    if target is None:
        current = _default_client()
        return attach(current) if current is not None else cluster()
    return attach(target)


def _default_client() -> Client | None:
    from distributed import default_client

    try:
        client = default_client()
    except ValueError:
        return None
    if client.status != "running":
        return None
    address = client.scheduler.address
    return client if any(c.address == address for c in clusters()) else None


def clusters() -> list[ClusterInfo]:
    """Your running clusters (entries of dead ones are pruned on the way)."""
    return _registry().list()


def down(name: str = "default", *, timeout: float = 30.0) -> bool:
    """Stop your cluster ``name`` if it runs; return whether there was one to stop.

    The cluster is asked to stop (SIGTERM: it removes its registry entry and closes
    its workers); if it has not within ``timeout``, its processes are SIGKILLed.
    """
    import psutil

    registry = _registry()
    with registry.starting(name, timeout=timeout + 60):
        info = registry.get(name)
        if info is None:
            return False
        _close_clients_of(info.address)
        try:
            family = [psutil.Process(info.pid), *psutil.Process(info.pid).children(True)]
        except psutil.NoSuchProcess:
            family = []
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.pid, signal.SIGTERM)
            os.kill(info.pid, signal.SIGCONT)  # a stopped process handles SIGTERM only then
        _, alive = psutil.wait_procs(family[:1], timeout=timeout)
        for proc in [*alive, *family[1:]]:
            with contextlib.suppress(psutil.NoSuchProcess):
                if proc.is_running():
                    proc.kill()
        psutil.wait_procs(family, timeout=10)
        registry.remove(name, pid=info.pid)
        return True


def _close_clients_of(address: str) -> None:
    """Close this process's clients of the cluster at ``address`` before it stops."""
    from distributed.client import _global_clients

    for client in {*_CLIENTS, *_global_clients.values()}:
        with contextlib.suppress(Exception):  # one already closing is fine
            scheduler = client.scheduler
            if client.status != "closed" and scheduler is not None and scheduler.address == address:
                client.close(timeout=5)


def hold(client: Client, key: str) -> list[str]:
    """Keep the cluster from its idle shutdown while ``key`` (a run, a service) uses it."""
    from ft_notebook.cluster._remote import scheduler_hold

    return list(client.run_on_scheduler(scheduler_hold, key=key, held=True))


def release(client: Client, key: str) -> list[str]:
    """End the hold ``key``; the idle timeout counts again once nothing else holds it."""
    from ft_notebook.cluster._remote import scheduler_hold

    return list(client.run_on_scheduler(scheduler_hold, key=key, held=False))


def rendezvous_address(client: Client) -> tuple[str, int]:
    """Host of the cluster's rendezvous store and port 0: it has no port of its own
    (ranks reach it through the scheduler, over the cluster's TLS connections)."""
    from ft_notebook.cluster._remote import scheduler_rendezvous

    host, port = client.run_on_scheduler(scheduler_rendezvous)
    return str(host), int(port)
