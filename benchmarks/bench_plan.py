"""Checkpoint planning: does Daly's model predict the waste a real save cost gives?

The save cost δ and the restart cost R are measured here, on a real store: δ is a
durable ``CheckpointStore.save`` of a 25 M-parameter model's state (median of 5), R
the ``load`` of that checkpoint (median of 5): what a restart reads. Then, for each
MTBF, a discrete-event simulation of a job checkpointed every τ, with failures from
a Poisson process (also during saves and restarts), runs until at least ``--failures``
failures happened, at Daly's τ, at half of it and at twice it. Goals: the simulated
waste within 1 point of Daly's model, and Daly's τ wasting less than both others.

    .venv/bin/python benchmarks/bench_plan.py [--failures 2000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ft_notebook.plan import daly_interval, waste
from ft_notebook.store import CheckpointStore


def measured_costs(reps: int = 5) -> tuple[float, float]:
    """(save δ, restart R) in seconds, medians of ``reps``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(2500, 2500) for _ in range(4)))
    state = {"model": model.state_dict()}
    saves, loads = [], []
    with tempfile.TemporaryDirectory() as root:
        store = CheckpointStore(Path(root), keep=2, publish_events=False)
        for step in range(reps):
            for p in model.parameters():  # a new state each time, as training makes
                p.data.add_(1e-3)
            start = time.perf_counter()
            store.save("plan", step, state)
            saves.append(time.perf_counter() - start)
            start = time.perf_counter()
            store.load("plan", step)
            loads.append(time.perf_counter() - start)
    return statistics.median(saves), statistics.median(loads)


def simulate(
    interval: float, cost: float, restart: float, mtbf: float, failures: int, seed: int
) -> tuple[float, int]:
    """(waste, failures) of a job checkpointed every ``interval``, run until
    ``failures`` failures were seen."""
    rng = random.Random(seed)
    wall = work = 0.0
    seen = 0
    segment = interval + cost
    while seen < failures:
        ttf = rng.expovariate(1 / mtbf)
        if ttf >= segment:  # the interval's work and its save both made it
            wall += segment
            work += interval
            continue
        wall += ttf  # lost since the last committed save
        seen += 1
        while True:  # the restart itself can fail
            ttf = rng.expovariate(1 / mtbf)
            if ttf >= restart:
                wall += restart
                break
            wall += ttf
            seen += 1
    return 1 - work / wall, seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--failures", type=int, default=2000)
    args = parser.parse_args()
    cost, restart = measured_costs()
    print(
        f"measured: save δ = {cost * 1e3:.0f} ms, restart R = {restart * 1e3:.0f} ms (medians of 5)\n"
    )
    print(
        "| MTBF | Daly τ | waste, Daly's model | simulated at τ | at τ/2 | at 2τ | model - simulated (points) | τ wastes least |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for mtbf in (cost * 20, cost * 200, cost * 2000):
        tau = daly_interval(cost, mtbf)
        model = waste(tau, cost, mtbf, restart)
        at = {
            k: simulate(tau * k, cost, restart, mtbf, args.failures, seed=int(k * 10))[0]
            for k in (1, 0.5, 2)
        }
        gap = (model - at[1]) * 100
        least = at[1] < at[0.5] and at[1] < at[2]
        print(
            f"| {mtbf:.1f} s | {tau:.2f} s | {model:.2%} | {at[1]:.2%} | {at[0.5]:.2%} | {at[2]:.2%} | "
            f"{gap:+.2f} | {'yes' if least else 'NO'} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
