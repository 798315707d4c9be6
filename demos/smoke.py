"""End-to-end smoke of what ft_notebook has so far (``make demo``).

A real Dask cluster of worker processes starts; the driver and each worker publish
events on one run's topic; a second client follows them live; the cluster goes away,
and the history is read back from the durable journal. Each step prints what it did.
The flagship training demo replaces this once ``ft.fit`` exists.
"""

from __future__ import annotations

import time


def worker_reports(topic: str) -> int:
    """Runs on a worker: publish that it joined, through the worker's own Dask link."""
    from distributed import get_worker

    from ft_notebook.events import WorkerJoined, publish

    me = get_worker()
    return publish(WorkerJoined(name=str(me.name), address=me.address), topic).seq


def main() -> None:
    import dask.config
    from distributed import Client, LocalCluster

    from ft_notebook.config import cluster_dask_config, get_config
    from ft_notebook.events import RunState, RunStateChanged, history, publish, run_topic, subscribe

    run = f"smoke-{time.strftime('%Y%m%d-%H%M%S')}"
    topic = run_topic(run)
    print(f"ft_notebook smoke: run {run!r}, journal in {get_config().data_dir / 'journal'}")

    t0 = time.perf_counter()
    with (
        dask.config.set(cluster_dask_config()),
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0"
        ) as cluster,
        Client(cluster) as client,
        Client(cluster, set_as_default=False) as watcher,
    ):
        print(
            f"1. started a LocalCluster of 2 worker processes in {time.perf_counter() - t0:.1f} s"
        )
        live: list[str] = []
        with subscribe(topic, lambda e: live.append(f"#{e.seq} {e.kind}"), via=watcher):
            publish(
                RunStateChanged(RunState.RUNNING, RunState.PENDING, "smoke started"), topic, run=run
            )
            seqs = client.gather(
                [
                    client.submit(worker_reports, topic, workers=[w], pure=False)
                    for w in client.scheduler_info()["workers"]
                ]
            )
            print(f"2. each worker published through Dask; their sequence numbers: {sorted(seqs)}")
            publish(
                RunStateChanged(RunState.COMPLETED, RunState.RUNNING, "smoke done"), topic, run=run
            )
            deadline = time.monotonic() + 10
            while len(live) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
        print(f"3. a second client followed the run live: {', '.join(live)}")
    print("4. the cluster is shut down; the journal still has the run:")
    for event in history(run=run):
        payload = event.payload()
        print(f"   #{event.seq} {event.kind:<18} {payload}")
    if len(live) != 4 or len(history(run=run)) != 4:
        raise SystemExit("smoke FAILED: expected 4 events live and in the journal")
    print(f"smoke OK: 4 events, live and durable (inspect with `ft-notebook events {topic}`)")


if __name__ == "__main__":
    main()
