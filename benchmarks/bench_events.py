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
    from _common import interleaved, timed
    from _report import Table, save
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
    table = Table(
        "publish",
        "Publishing an event",
        f"An ft_notebook event (journal append under flock, then Dask's event log) against a "
        f"bare `Client.log_event` of the same message to the same scheduler; each sample "
        f"is the mean of {N} calls, {REPEATS} interleaved rounds, 1 worker.",
    )
    table.row(
        "publish one event",
        "s",
        results["publish"],
        reference=results["log_event"],
        reference_name="Client.log_event",
        ratio="pairs",
    )
    save("events", "Events", [table])


if __name__ == "__main__":
    main()
