"""Fault drills on a real cluster: kill, hang or resume one worker process.

``kill_worker`` sends SIGKILL (a crash, the OOM killer), ``hang_worker`` SIGSTOP (a
hang: the process holds its connections but says nothing) and ``resume_worker``
SIGCONT. The worker is named by its stable name (``"cpu1"``, ``"gpu0"``) or
``"random"``. The signal goes through the worker's nanny, so it reaches workers on
other hosts too; a worker without a nanny is signalled directly when it runs on this
host. The ``%ft chaos`` magic calls these.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
from dataclasses import dataclass
from typing import Any

from ft_notebook.exceptions import ClusterError

__all__ = ["ChaosAction", "hang_worker", "kill_worker", "resume_worker"]


@dataclass(frozen=True)
class ChaosAction:
    """What was done: the signal, to which worker, to which process."""

    signal: str
    worker: str
    address: str
    pid: int


def kill_worker(
    client: Any, worker: str = "random", *, rng: random.Random | None = None
) -> ChaosAction:
    """SIGKILL a worker's process; its nanny starts a fresh one under the same name."""
    return _signal(client, worker, signal.SIGKILL, rng)


def hang_worker(
    client: Any, worker: str = "random", *, rng: random.Random | None = None
) -> ChaosAction:
    """SIGSTOP a worker's process: it keeps its connections and stops answering."""
    return _signal(client, worker, signal.SIGSTOP, rng)


def resume_worker(client: Any, worker: str, *, rng: random.Random | None = None) -> ChaosAction:
    """SIGCONT a worker's process (harmless if it was not stopped)."""
    return _signal(client, worker, signal.SIGCONT, rng)


def choose(workers: list[dict[str, Any]], worker: str, rng: random.Random | None) -> dict[str, Any]:
    """The worker named ``worker`` (or a random one) among the scheduler's workers."""
    if not workers:
        raise ClusterError("The cluster has no workers right now; there is nothing to signal.")
    if worker == "random":
        return (rng or random.Random()).choice(sorted(workers, key=lambda w: w["name"]))
    for w in workers:
        if w["name"] == str(worker):
            return w
    names = sorted(w["name"] for w in workers)
    raise ClusterError(
        f"No worker is named {worker!r}; the cluster has {names}. Name one of them, or 'random'."
    )


def _signal(
    client: Any, worker: str, sig: signal.Signals, rng: random.Random | None
) -> ChaosAction:
    from distributed.comm.addressing import get_address_host

    from ft_notebook.cluster._control import signal_worker_process
    from ft_notebook.cluster._remote import scheduler_workers

    target = choose(client.run_on_scheduler(scheduler_workers), worker, rng)
    address = target["address"]
    if sig != signal.SIGCONT:
        _note_drill(client, str(target["name"]), address, sig)
    if target["nanny"]:
        try:
            result = client.run(signal_worker_process, int(sig), workers=[address], nanny=True)
        except KeyError as e:  # the scheduler dropped it between the listing and the signal
            raise ClusterError(
                f"Worker {target['name']!r} left before it could be signalled (it was at "
                f"{address}, now unknown to the scheduler: {e}). It may be restarting: "
                f"list the workers again and retry."
            ) from e
        pid = int(result[address])
    elif target["pid"] and get_address_host(address) in _local_hosts():
        pid = int(target["pid"])
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            raise ClusterError(
                f"Worker {target['name']!r} (process {pid}) has exited already. List the "
                f"workers again and retry."
            ) from None
    else:
        raise ClusterError(
            f"Worker {target['name']!r} at {address} has no nanny and runs on another "
            f"host, so its process cannot be signalled from here."
        )
    return ChaosAction(signal=sig.name, worker=target["name"], address=address, pid=pid)


def _note_drill(client: Any, name: str, address: str, sig: signal.Signals) -> None:
    """Journal the drill before its signal, so that what it causes is known as a
    drill: the MTBF a run plans with counts no rehearsal (train.kernel._mtbf)."""
    from ft_notebook.events import cluster_topic, publish
    from ft_notebook.exceptions import FTError

    with contextlib.suppress(FTError, OSError):  # a drill goes on without its note
        publish(
            {"drill": sig.name, "name": name, "address": address},
            cluster_topic(),
            worker=name,
            via=client,
        )


def _local_hosts() -> set[str]:
    import socket

    hosts = {"127.0.0.1", "localhost", "::1", socket.gethostname()}
    with contextlib.suppress(OSError):
        hosts.update(socket.gethostbyname_ex(socket.gethostname())[2])
    return hosts
