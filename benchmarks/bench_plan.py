"""Checkpoint planning: does Daly's model predict the waste a real save cost gives?

The save cost δ and the restart cost R are measured here, on a real store: δ is a
durable ``CheckpointStore.save`` of a 25 M-parameter model's state (median of 5), R
the ``load`` of that checkpoint (median of 5): what a restart reads. Then, for each
MTBF, a discrete-event simulation of a job checkpointed every τ, with failures from
a Poisson process (also during saves and restarts), runs until at least ``--failures``
failures happened, at Daly's τ, at half of it and at twice it. Goals: the simulated
waste within 1 point of Daly's model, and Daly's τ wasting less than both others.

``--real``: one real run instead, reported beside the model without a goal: ``ft.fit``
with ``checkpoint_every="auto"`` on a LocalCluster of 3 worker processes for
``--minutes``, a random worker SIGKILLed at Poisson times of mean ``--mtbf`` seconds
(its nanny starts it again, and it rejoins), the run planning with that MTBF. Its
waste (the share of wall-clock time not spent stepping at the full world's speed:
saves, recoveries, steps at a smaller world, work lost) against Daly's model fed the
run's measured save cost, the median recovery time as R, and the MTBF; and each
recovery's RTO and work lost.

    .venv/bin/python benchmarks/bench_plan.py [--failures 2000]
    .venv/bin/python benchmarks/bench_plan.py --real [--minutes 10] [--mtbf 60]
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
from ft_notebook.plan import expected_loss as model_loss
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


def real_run(minutes: float, mtbf: float, seed: int = 0) -> Table:
    """One real "auto" run with worker failures injected as a Poisson process."""
    import dask.config

    from ft_notebook.cluster.chaos import kill_worker
    from ft_notebook.config import reload_config
    from ft_notebook.testing import training_cluster
    from ft_notebook.testing.training import regression_problem
    from ft_notebook.train import fit

    rng = random.Random(seed)
    problem = regression_problem(size=256 * 100, batch=256, features=256, hidden=1024)
    settings = {"ft-notebook.train.mtbf": mtbf, "ft-notebook.train.mtbf-from-journal": False}
    kills = 0
    with dask.config.set(settings), tempfile.TemporaryDirectory() as store:
        reload_config()
        with training_cluster(3, silence_logs=50) as client:
            started = time.monotonic()
            run = fit(
                **problem,
                epochs=100_000,  # cancelled at the deadline
                cluster=client,
                name="plan-real",
                store=store,
                checkpoint_every="auto",
                wait=False,
            )
            end = started + minutes * 60
            next_kill = started + rng.expovariate(1 / mtbf)
            while (now := time.monotonic()) < end:
                if now >= next_kill:
                    victim = kill_worker(client, "random", rng=rng)
                    kills += 1
                    print(
                        f"real: killed worker {victim.worker} at {now - started:.0f} s",
                        file=sys.stderr,
                        flush=True,
                    )
                    next_kill = now + rng.expovariate(1 / mtbf)
                time.sleep(min(0.5, max(0.0, min(next_kill, end) - time.monotonic())))
            info = run.info()
            wall = time.monotonic() - started
            run.cancel()
    reload_config()
    steps = int(info["step"])
    full = max(int(p.get("world_size") or 0) for p in info["history"])
    rates = [
        float(p["steps_per_s"])
        for p in info["history"]
        if p.get("steps_per_s") and p.get("world_size") == full
    ]
    step_s = 1 / statistics.median(rates)
    recoveries = info["recoveries"]
    rtos = [float(r["rto_s"]) for r in recoveries] or [0.0]
    lost = [float(r["steps_lost"]) * step_s for r in recoveries] or [0.0]
    plan = info["checkpoint_plan"] or {}
    cost = float(info["checkpoint_cost_s"] or plan.get("cost_s") or 1e-6)
    restart = statistics.median(rtos)
    interval = float(plan.get("interval_s") or daly_interval(cost, mtbf))
    measured = 1 - steps * step_s / wall
    model = waste(interval, cost, mtbf, restart)
    t = Table(
        "plan-real",
        "A real run with injected failures, beside the model",
        f"ft.fit(checkpoint_every='auto') of an MLP 256-1024-1024-1 with Adam (1.3 M "
        f"parameters), batches of 256, on a LocalCluster of 3 worker processes for "
        f"{minutes:g} min; a random worker SIGKILLed at Poisson times of mean {mtbf:g} s "
        f"({kills} kills; its nanny restarts it and it rejoins); the run planned with M = "
        f"{mtbf:g} s. Waste: 1 − steps × (median step time at the full world, "
        f"{step_s * 1e3:.1f} ms) / wall-clock; Daly's model fed the run's measured save "
        f"cost δ = {cost * 1e3:.1f} ms, its interval τ = {interval:.2f} s and R = the "
        f"median RTO. No goal. The run loses no steps to a worker loss (the survivors go "
        f"on), where the model redoes the work since the last save; but its wall clock "
        f"also holds what the model does not count: the run's start-up (each worker "
        f"builds the model and data) and the steps at 2 workers until a restarted worker "
        f"rejoins.",
    )
    t.row(
        "waste of the real run",
        "%",
        [measured * 100],
        reference=[model * 100],
        reference_name="Daly's model, same δ, τ, R, M",
        detail=f"{steps:,} steps in {wall:.0f} s, {len(recoveries)} recoveries",
    )
    t.row("recovery time (RTO), each", "s", rtos, reference=[restart], reference_name="R (median)")
    t.row(
        "work lost per recovery (RPO), each",
        "s",
        lost,
        reference=[model_loss(interval, cost, mtbf)],
        reference_name="expected loss per failure, Daly's model",
    )
    print(
        f"real: {steps} steps in {wall:.0f} s, waste {measured:.2%} (model {model:.2%}), "
        f"{len(recoveries)} recoveries, RTO median {restart:.3f} s, δ {cost * 1e3:.1f} ms",
        file=sys.stderr,
    )
    return t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--failures", type=int, default=2000)
    parser.add_argument("--real", action="store_true", help="one real run instead (see above)")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--mtbf", type=float, default=60.0, help="--real: seconds between kills")
    args = parser.parse_args()
    if args.real:
        save("plan", "Checkpoint planning", [real_run(args.minutes, args.mtbf)])
        return
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
