"""What the authenticated rendezvous store costs a new process group (issue 36).

The ranks' store now lives in the scheduler behind the cluster's TLS connections
(:class:`ft_notebook.train.rank._store.ClusterStore`, one Dask RPC per store call);
the reference is what it replaced: a raw ``torch.distributed.TCPStore`` hosted in the
same scheduler process, each rank with a fresh client, as the ranks had them. Both
arms form a gloo group of 2 and of 3 ranks on a real private cluster from
``ft.cluster()`` (one rank per worker, in a task) under a fresh prefix, then run one
all-reduce. The time of a formation is from the last rank's start (it makes its store
client) to the last rank's group ready (its all-reduce done). The arms alternate.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from typing import Any

REPEATS = 25
WORLDS = (2, 3)


def open_tcpstore(dask_scheduler: Any = None) -> int:
    """On the scheduler: a raw TCPStore on loopback, as the rendezvous was (kept on the
    scheduler object so it lives as long as the cluster)."""
    import torch.distributed as dist

    store = getattr(dask_scheduler, "_bench_tcpstore", None)
    if store is None:
        store = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)  # type: ignore[attr-defined]
        dask_scheduler._bench_tcpstore = store
    return int(store.port)


def form(arm: str, port: int, prefix: str, rank: int, world: int) -> tuple[float, float]:
    """In a worker's task thread: make a store client and a gloo group on it, run one
    all-reduce; (start, ready) wall-clock times."""
    import datetime

    import torch
    import torch.distributed as dist
    from distributed import get_worker

    from ft_notebook.train.rank._store import ClusterStore

    start = time.time()
    if arm == "tls":
        store: Any = ClusterStore(get_worker(), timeout_s=60)
    else:
        store = dist.TCPStore(  # type: ignore[attr-defined]
            "127.0.0.1", port, None, False, timeout=datetime.timedelta(seconds=60)
        )
    group = dist.ProcessGroupGloo(  # type: ignore[attr-defined]
        dist.PrefixStore(prefix, store),  # type: ignore[attr-defined]
        rank,
        world,
        datetime.timedelta(seconds=60),
    )
    group.allreduce([torch.ones(1)]).wait()
    ready = time.time()
    del group
    return start, ready


def main() -> None:
    os.environ.setdefault("DASK_FT_NOTEBOOK__DATA_DIR", tempfile.mkdtemp(prefix="ft-bench-"))
    import cloudpickle
    from _report import Goal, Table, save

    import ft_notebook
    from ft_notebook.cluster import down

    cloudpickle.register_pickle_by_value(__import__(__name__))
    name = f"bench-rdv-{uuid.uuid4().hex[:6]}"
    client = ft_notebook.cluster(name=name, workers=max(WORLDS), set_as_default=False)
    try:
        client.wait_for_workers(max(WORLDS), timeout=120)
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        port = client.run_on_scheduler(open_tcpstore)

        def formation(arm: str, world: int) -> float:
            prefix = f"bench/{arm}/{uuid.uuid4().hex}/"
            futures = [
                client.submit(
                    form, arm, port, prefix, r, world, workers=[w], pure=False, key=f"{prefix}{r}"
                )
                for r, w in enumerate(workers[:world])
            ]
            times = client.gather(futures)
            return max(ready for _, ready in times) - max(start for start, _ in times)

        for arm in ("tls", "tcpstore"):  # warm-up: imports, connections
            formation(arm, 2)
        results: dict[tuple[str, int], list[float]] = {}
        for _ in range(REPEATS):
            for world in WORLDS:
                for arm in ("tls", "tcpstore"):
                    results.setdefault((arm, world), []).append(formation(arm, world))
    finally:
        client.close()
        down(name)
    table = Table(
        "formation",
        "Forming a new gloo group",
        f"A gloo group of 2 and of 3 ranks (one per worker of a private `ft.cluster()`, "
        f"TLS, 3 workers on 2 cores) formed under a fresh prefix and one all-reduce run, "
        f"through the store in the scheduler reached over the cluster's TLS connections "
        f"against a raw TCPStore in the same scheduler (what the ranks used before issue "
        f"36); from the last rank's start (its store client made) to the last rank's "
        f"group ready; {REPEATS} alternating rounds.",
    )
    for world in WORLDS:
        table.row(
            f"new group of {world} ranks",
            "s",
            results[("tls", world)],
            reference=results[("tcpstore", world)],
            reference_name="raw TCPStore in the scheduler",
            ratio="pairs",
            goal=Goal("ratio", "<=", 1.5),
        )
    save("rendezvous", "Rendezvous: the store only the cluster can use", [table])


if __name__ == "__main__":
    main()
