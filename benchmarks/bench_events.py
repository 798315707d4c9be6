"""Cost of publishing an event, against Dask's own ``Client.log_event``.

An ft_notebook event is journaled (flock, append, flush) before it is sent through
the same scheduler event log, so the reference is a bare ``log_event`` of the same
message to the same scheduler, in the same run. Events are state changes (a worker
lost, a checkpoint committed), not per-step metrics: a few per second at most.
"""

from __future__ import annotations

import os
import tempfile

N = 200
REPEATS = 7


def main() -> None:
    os.environ.setdefault("DASK_FT_NOTEBOOK__DATA_DIR", tempfile.mkdtemp(prefix="ft-bench-"))
    import dask.config
    from _common import interleaved, median, row, timed
    from distributed import Client, LocalCluster

    from ft_notebook.config import cluster_dask_config
    from ft_notebook.events import WorkerLost, publish, run_topic

    topic = run_topic("bench-events")
    message = WorkerLost(name="w1", address="tcp://127.0.0.1:1", cause="benchmark")
    with (
        dask.config.set(cluster_dask_config()),
        LocalCluster(
            n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0"
        ) as lc,
        Client(lc) as client,
    ):

        def ours() -> float:
            return timed(lambda: [publish(message, topic, via=client) for _ in range(N)]) / N

        def reference() -> float:
            raw = {
                "ft-notebook-event": {
                    "seq": 1,
                    "topic": topic,
                    "kind": "worker-lost",
                    "data": message.__dict__,
                }
            }
            return timed(lambda: [client.log_event(topic, raw) for _ in range(N)]) / N

        results = interleaved({"publish": ours, "log_event": reference}, REPEATS)
    ours_s, ref_s = median(results["publish"]), median(results["log_event"])
    print(row("benchmark", "ft_notebook", "reference", "ratio (ours/ref)", "goal"))
    print(row("---", "---", "---", "---", "---"))
    print(
        row(
            f"publish one event (journal + Dask), median of {REPEATS}x{N}",
            f"{ours_s * 1e3:.3f} ms",
            f"{ref_s * 1e3:.3f} ms (Client.log_event)",
            f"{ours_s / ref_s:.2f}",
            "none set (informational)",
        )
    )


if __name__ == "__main__":
    main()
