"""What an open dashboard costs training: steps per second with and without one.

    .venv/bin/python benchmarks/bench_dashboard.py [--pairs 5]

A real IPython kernel (``ft_notebook.testing.KernelSession``) drives ``ft.fit`` on a
LocalCluster of 2 worker processes (the same problem each time: ``regression_problem``,
an MLP 256-512-1, global batch 256). In one arm the cell shows ``run.dashboard()``
before training (its widget messages go out on the kernel's iopub channel, where the
session reads them, as a front end would); in the other it does not. Arms alternate,
``--pairs`` pairs. Saved to ``results/dashboard.json`` (``_report.py``), each pair's
figures: steady-state samples/s (from the run's history; the median of the paired
ratios, with / without, against the goal) and the kernel's CPU seconds per second of
training in each arm, since on a shared 2-core machine the ratio can drown in noise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _report import Goal, Table, save

CELL = textwrap.dedent(
    """
    import json, time, psutil
    import ft_notebook as ft
    from ft_notebook.testing.training import regression_problem
    problem = regression_problem(size={size}, batch=256, features=256, hidden=512)
    run = ft.fit(epochs={epochs}, cluster=client, name="{name}", store="{store}", wait=False,
                 checkpoint_every=1000, **problem)
    if {show}:
        d = run.dashboard()
        display(d)
    me = psutil.Process()
    cpu0, t0 = sum(me.cpu_times()[:2]), time.time()
    run.wait(timeout=600)
    cpu1, t1 = sum(me.cpu_times()[:2]), time.time()
    points = [(p["step"], p["time"]) for p in run.info()["history"] if p["step"] >= {warmup}]
    (s0, a), (s1, b) = points[0], points[-1]
    if {show}:
        d.close()
    print("RESULT", json.dumps({{"rate": (s1 - s0) / (b - a) * 256, "cpu_per_s": (cpu1 - cpu0) / (t1 - t0)}}))
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()

    from ft_notebook.testing import KernelSession, training_cluster

    work = Path(tempfile.mkdtemp(prefix="ft-bench-dashboard-"))
    env = dict(os.environ, DASK_FT_NOTEBOOK__DATA_DIR=str(work / "data"))
    os.environ["DASK_FT_NOTEBOOK__DATA_DIR"] = str(work / "data")
    results: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    with training_cluster(2) as client:
        kernel = KernelSession(work / "kernel.log", cwd=work, env=env).start()
        try:
            kernel.execute(
                f"from distributed import Client\nclient = Client({client.scheduler.address!r}, set_as_default=False)",
                timeout=60,
            ).check()
            for i in range(args.pairs):
                for show in (i % 2 == 0, i % 2 == 1):  # alternate which arm goes first
                    code = CELL.format(
                        size=256 * 10,
                        epochs=-(-args.steps // 10),
                        name=f"dash-{i}-{int(show)}-{time.time_ns()}",
                        store=work / "store",
                        show=show,
                        warmup=args.warmup,
                    )
                    out = kernel.execute(code, timeout=900).check()
                    line = next(t for t in out.stdout.splitlines() if t.startswith("RESULT "))
                    results[show].append(json.loads(line[7:]))
                    print(f"  pair {i} dashboard={show}: {results[show][-1]}", file=sys.stderr)
        finally:
            kernel.shutdown()
    table = Table(
        "cost",
        "What an open dashboard costs training",
        f"A real IPython kernel drives `ft.fit` on a LocalCluster of 2 worker processes "
        f"(`regression_problem`: MLP 256-512-1, global batch 256, {args.steps} steps, "
        f"measured from step {args.warmup}), with `run.dashboard()` displayed (its widget "
        f"messages read off iopub as a front end would) or not; {args.pairs} pairs, the "
        f"arms alternating and which goes first alternating too.",
    )
    table.row(
        "training samples/s",
        "samples/s",
        [r["rate"] for r in results[True]],
        reference=[r["rate"] for r in results[False]],
        reference_name="no dashboard",
        ratio="pairs",
        goal=Goal("ratio", ">=", 0.99),
    )
    table.row(
        "kernel CPU s per s of training",
        "CPU s/s",
        [r["cpu_per_s"] for r in results[True]],
        reference=[r["cpu_per_s"] for r in results[False]],
        reference_name="no dashboard",
        ratio="pairs",
    )
    save("dashboard", "Dashboards", [table])


if __name__ == "__main__":
    main()
