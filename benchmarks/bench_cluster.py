"""Cold start and attach of ``ft_notebook.cluster.cluster()`` next to a LocalCluster.

Each run starts a fresh cluster of the same size (``--workers`` processes, one thread
each) and measures the time until a connected Client is in hand:

- ``cluster()`` cold: no cluster runs; a detached one starts (TLS certificates made,
  daemon spawned, scheduler and workers up, torch preloaded in every worker);
- ``cluster()`` attach: it runs already; found in the registry, TLS connect;
- ``LocalCluster``: Dask's own, in-process scheduler, plain TCP, no preload;
- ``LocalCluster`` + torch preload: the same, with the workers importing torch as ours
  do, to show how much of the difference is torch;
- ``Client(address)`` attach to the LocalCluster, for the attach comparison.

Saves every timing to ``results/cluster.json`` (``_report.py``): each of our rows
against the LocalCluster of the same kind, paired run by run. Uses a temporary data
folder, never the user's registry::

    python benchmarks/bench_cluster.py [--runs 5] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--attaches", type=int, default=5, help="attach timings per run")
    args = parser.parse_args()

    data = tempfile.mkdtemp(prefix="ft-bench-cluster-")
    os.environ["DASK_FT_NOTEBOOK__DATA_DIR"] = data

    import dask.config
    from distributed import Client, LocalCluster

    from ft_notebook.cluster import cluster, down
    from ft_notebook.config import cluster_dask_config, reload_config

    reload_config()
    n = args.workers
    keys = ("cold", "attach", "lc", "lc-torch", "lc-attach")
    times: dict[str, list[float]] = {k: [] for k in keys}
    clock = time.perf_counter

    def start_local(preload: list[str]) -> LocalCluster:
        with dask.config.set(cluster_dask_config()):
            return LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                silence_logs=40,
                preload=preload,
            )

    for run in range(args.runs):
        name = f"bench-{run}"
        t0 = clock()
        client = cluster(name=name, workers=n, set_as_default=False)
        times["cold"].append(clock() - t0)
        client.close()
        for _ in range(args.attaches):
            t0 = clock()
            client = cluster(name=name, set_as_default=False)
            times["attach"].append(clock() - t0)
            client.close()
        down(name)

        for key, preload in (("lc", []), ("lc-torch", ["ft_notebook.cluster._preload"])):
            t0 = clock()
            lc = start_local(preload)
            client = Client(lc, set_as_default=False)
            times[key].append(clock() - t0)
            if key == "lc":
                for _ in range(args.attaches):
                    t0 = clock()
                    other = Client(lc.scheduler_address, set_as_default=False)
                    times["lc-attach"].append(clock() - t0)
                    other.close()
            client.close()
            lc.close()

    from _report import Table, save

    cores = len(os.sched_getaffinity(0))
    table = Table(
        "start",
        "Starting and attaching to a private cluster",
        f"Time until a connected Client is in hand: `ft.cluster()` (detached daemon, TLS, "
        f"torch preloaded in every worker) against Dask's `LocalCluster` (in-process "
        f"scheduler, TCP), a fresh cluster of {n} workers x 1 thread per run, {args.runs} "
        f"runs ({args.runs * args.attaches} attach timings), {cores} cores.",
    )
    table.row(
        "`ft.cluster()` cold start",
        "s",
        times["cold"],
        reference=times["lc"],
        reference_name="`LocalCluster` start",
        ratio="pairs",
    )
    table.row(
        "`ft.cluster()` cold start",
        "s",
        times["cold"],
        reference=times["lc-torch"],
        reference_name="`LocalCluster` start + torch preload",
        ratio="pairs",
    )
    table.row(
        "`ft.cluster()` attach (registry + TLS connect)",
        "s",
        times["attach"],
        reference=times["lc-attach"],
        reference_name="`Client(address)` to the LocalCluster",
        ratio="pairs",
    )
    save("cluster", "Private cluster", [table])


if __name__ == "__main__":
    main()
