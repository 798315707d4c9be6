"""What ``Run.wait()`` pulls from the scheduler while a run trains: following the
run's events against polling its whole record (the way ``wait()`` worked before).

Both arms watch the same run at the same time: ``run.wait()`` in the main thread, and
in a thread the old loop (the whole record every 0.1 s). Each reply and each live event is
counted as its pickled size (protocol 5) as it reaches this process: the payload
bytes, the same measure for both arms. The run's history grows as it trains (up to
2,000 points), and with it the old arm's replies, so the longer a run, the larger the
ratio: these runs are short, which flatters the old way.

    .venv/bin/python benchmarks/bench_wait.py [--runs 3] [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import pickle
import tempfile
import threading
import time
from typing import Any


def one_run(client: Any, seconds: float, index: int) -> tuple[float, float, int]:
    """Bytes per second pulled by (followed, polled), and the history's points at the end."""
    from ft_notebook import _delivery
    from ft_notebook.testing.training import counting_problem
    from ft_notebook.train import fit
    from ft_notebook.train.kernel import _handle
    from ft_notebook.train.kernel._calls import ask
    from ft_notebook.train.protocol import RunAction

    pulled = {"followed": 0, "polled": 0}
    real_dispatch = _delivery._DaskFanout._dispatch

    def counted_ask(client: Any, action: RunAction, **kwargs: Any) -> Any:
        out = ask(client, action, **kwargs)
        arm = "polled" if getattr(threading.current_thread(), "polls", False) else "followed"
        pulled[arm] += len(pickle.dumps(out, protocol=5))
        return out

    def counted_dispatch(self: Any, topic: str, raw: tuple[float, Any]) -> None:
        pulled["followed"] += len(pickle.dumps(raw, protocol=5))
        real_dispatch(self, topic, raw)

    size = 32 * int(seconds * 40)  # about 40 steps a second for `seconds`
    run = fit(
        epochs=1,
        cluster=client,
        name=f"bench-wait-{index}",
        wait=False,
        batch_size=32,
        **{k: v for k, v in counting_problem(size=size, delay_s=0.02).items() if k != "batch_size"},
    )
    done = threading.Event()

    def old_wait() -> None:
        threading.current_thread().polls = True  # type: ignore[attr-defined]
        while not done.is_set():
            info = counted_ask(client, RunAction.INFO, name=run.name)
            if info["state"] in ("COMPLETED", "FAILED", "CANCELLED"):
                return
            time.sleep(0.1)

    _handle.ask = counted_ask  # type: ignore[assignment]
    _delivery._DaskFanout._dispatch = counted_dispatch  # type: ignore[method-assign]
    try:
        poller = threading.Thread(target=old_wait)
        started = time.monotonic()
        poller.start()
        run.wait(progress=False)
        elapsed = time.monotonic() - started
        done.set()
        poller.join()
    finally:
        _handle.ask = ask
        _delivery._DaskFanout._dispatch = real_dispatch  # type: ignore[method-assign]
    points = len(run.info()["history"])
    return pulled["followed"] / elapsed, pulled["polled"] / elapsed, points


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    os.environ.setdefault("DASK_FT_NOTEBOOK__DATA_DIR", tempfile.mkdtemp(prefix="ft-bench-"))
    from _report import Goal, Table, save

    from ft_notebook.testing import training_cluster

    followed, polled, points = [], [], []
    with training_cluster(2) as client:
        for i in range(args.runs):
            f, p, n = one_run(client, args.seconds, i)
            followed.append(f)
            polled.append(p)
            points.append(n)
            print(f"run {i}: followed {f:,.0f} B/s, polled {p:,.0f} B/s, {n} history points")
    table = Table(
        "wait-bytes",
        "What Run.wait() pulls from the scheduler",
        f"`run.wait()` following the run's events (and its state every 5 s) against the "
        f"old loop, the whole record (`run.info()`) every 0.1 s, watching the same run at the same time: "
        f"payload bytes per second (pickled, protocol 5). {args.runs} runs of about "
        f"{args.seconds:g} s, 2 workers; their histories ended with {min(points)}–"
        f"{max(points)} of at most 2,000 points, so the old loop's replies were smaller "
        f"than a long run's.",
    )
    table.row(
        "bytes per second pulled while waiting",
        "B/s",
        followed,
        reference=polled,
        reference_name="run.info() every 0.1 s",
        ratio="pairs",
        goal=Goal("ratio", "<=", 0.1),
    )
    save("wait", "Waiting for a run", [table])


if __name__ == "__main__":
    main()
