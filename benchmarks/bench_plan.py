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
import sys
import tempfile
import time
from pathlib import Path

import torch
from _report import Goal, Table, save

from ft_notebook.plan import daly_interval, waste
from ft_notebook.store import CheckpointStore


def measured_costs(reps: int = 5) -> tuple[list[float], list[float]]:
    """(saves δ, restarts R) in seconds, ``reps`` of each."""
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
    return saves, loads


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
    saves, loads = measured_costs()
    cost, restart = statistics.median(saves), statistics.median(loads)
    print(
        f"measured: save δ = {cost * 1e3:.0f} ms, restart R = {restart * 1e3:.0f} ms "
        f"(medians of {len(saves)})",
        file=sys.stderr,
    )
    costs = Table(
        "plan-costs",
        "Save and restart costs the planner is given",
        f"δ is a durable `CheckpointStore.save` of a 25 M-parameter model's state (4 linear "
        f"layers 2500x2500), R the `load` of that checkpoint (what a restart reads), "
        f"{len(saves)} of each, alternating; both are ft_notebook's (no reference exists), "
        f"so R is shown beside δ. Their medians drive the simulation below.",
    )
    costs.row(
        "restart R (load)", "s", loads, reference=saves, reference_name="save δ", ratio="pairs"
    )
    sim = Table(
        "plan-daly",
        "Daly's model against a simulation",
        f"Per MTBF (20, 200 and 2,000 times the measured δ = {cost * 1e3:.0f} ms, R = "
        f"{restart * 1e3:.0f} ms), a discrete-event simulation of a job checkpointed every "
        f"τ, with Poisson failures (also during saves and restarts), until "
        f"{args.failures:,} failures, at Daly's τ, τ/2 and 2τ; waste is the share of "
        f"wall-clock time not spent on work, one simulation per interval.",
    )
    for times in (20, 200, 2000):
        mtbf = cost * times
        tau = daly_interval(cost, mtbf)
        model = waste(tau, cost, mtbf, restart)
        at = {
            k: simulate(tau * k, cost, restart, mtbf, args.failures, seed=int(k * 10))[0]
            for k in (1, 0.5, 2)
        }
        label = f"MTBF {times:,}δ"
        sim.row(
            f"{label}: waste at Daly's τ, simulated",
            "%",
            [at[1] * 100],
            reference=[model * 100],
            reference_name="Daly's model",
            detail=f"MTBF {mtbf:.1f} s, τ {tau:.2f} s",
        )
        sim.row(
            f"{label}: |simulated − model| waste at τ",
            "points",
            [abs(at[1] - model) * 100],
            goal=Goal("value", "<=", 1.0),
        )
        for k, name in ((0.5, "τ/2"), (2, "2τ")):
            sim.row(
                f"{label}: simulated waste at τ, against {name}",
                "%",
                [at[1] * 100],
                reference=[at[k] * 100],
                reference_name=f"at {name}",
                goal=Goal("ratio", "<", 1.0),  # Daly's τ wastes least
            )
        print(
            f"{label}: model {model:.2%}, simulated {at[1]:.2%} (τ/2 {at[0.5]:.2%}, "
            f"2τ {at[2]:.2%})",
            file=sys.stderr,
            flush=True,
        )
    save("plan", "Checkpoint planning", [costs, sim])


if __name__ == "__main__":
    main()
