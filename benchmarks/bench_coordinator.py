"""How long the run coordinator takes to decide, per input, over a 1,000-step run with
10 faults: context for issue 33's pure-decision redesign, measured on today's code.

Each input is what the scheduler hands the coordinator on its event loop (a rank's
report, the control plane's news of a worker lost, hung or back, a kernel's call),
handled by the real coordinator (``ft_notebook.testing.coordinator_drive``, no
cluster: the ranks' answers are stubbed) with its events journaled to a real data
folder, as in a scheduler. The run: 1,000 steps, rank 0 reporting progress each
step (the publisher's turn every 4th) and a checkpoint every 50 steps, with 10 faults
at fixed steps (kills and hangs, each followed by the survivors' first step and the
worker's return). Timed: each input, from the call to the coordinator being done
with it and its background tasks (one turn of the loop).

    .venv/bin/python benchmarks/bench_coordinator.py [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid

#: The steps at which a fault strikes, and which.
FAULTS = {s: ("kill" if i % 2 == 0 else "hang") for i, s in enumerate(range(90, 1000, 91))}


def one_run() -> list[float]:
    """Seconds each input of one 1,000-step run took the coordinator."""
    from ft_notebook.testing.coordinator_drive import Drive

    times: list[float] = []

    async def scenario() -> None:
        drive = await Drive.started(f"bench-{uuid.uuid4().hex[:8]}")

        async def timed(op: str) -> None:
            started = time.perf_counter()
            await drive.do(op)
            times.append(time.perf_counter() - started)

        for step in range(1, 1001):
            drive.step = step - 1  # do("progress") moves it on by 5: one step here
            await timed("progress" if step % 4 == 0 else "quiet-progress")
            drive.step = step
            if step % 50 == 0:
                await timed("checkpoint")
            if step in FAULTS:
                await timed(FAULTS[step])
                await timed("resumed")
                await timed("rejoin")
                await timed("resumed")

    asyncio.run(scenario())
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("DASK_FT_NOTEBOOK__DATA_DIR", tempfile.mkdtemp(prefix="ft-bench-"))
    os.environ.setdefault("DASK_FT_NOTEBOOK__EVENTS__TRANSPORT", "local")
    from _report import Goal, Table, save

    medians, p99s, counts = [], [], []
    for i in range(args.runs):
        times = sorted(one_run())
        medians.append(times[len(times) // 2])
        p99s.append(times[int(len(times) * 0.99)])
        counts.append(len(times))
        print(
            f"run {i}: {len(times)} inputs, median {medians[-1] * 1e6:.0f} µs, "
            f"p99 {p99s[-1] * 1e6:.0f} µs, max {times[-1] * 1e3:.1f} ms"
        )
    table = Table(
        "coordinator-decisions",
        "The run coordinator's time per input",
        f"The real coordinator, no cluster (ranks' answers stubbed), events journaled: "
        f"{args.runs} runs of 1,000 steps with {len(FAULTS)} faults each "
        f"({min(counts)}–{max(counts)} inputs a run). Each value is one run's median or "
        f"99th percentile. Context for issue 33 (no goal there); the goal here is ours: "
        f"a decision must not hold the scheduler's event loop for a heartbeat's time.",
    )
    table.row("median per input", "s", medians, goal=Goal("value", "<=", 0.005))
    table.row("99th percentile per input", "s", p99s, goal=Goal("value", "<=", 0.02))
    save("coordinator", "The run coordinator", [table])


if __name__ == "__main__":
    main()
