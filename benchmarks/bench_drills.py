"""Random fault drills against ``ft.fit``: many seeds of
:mod:`ft_notebook.testing.training_chaos`, each checked against an undisturbed run.

    .venv/bin/python benchmarks/bench_drills.py [--drills 200] [--first-seed 0] [--baseline 20]
    .venv/bin/python benchmarks/bench_drills.py --models cnn,transformer --drills 100

A LocalCluster of 3 worker processes (the tests' ``training_cluster``: nannies, one
thread each, torch preloaded, Dask's lost-worker-timeout raised). Seed ``s`` draws
1-3 faults (SIGKILL of a member, of rank 0, of two at once, during a recovery, of a
restarted worker while it warms up; SIGSTOP hangs) at random steps of a 256-step run
of the drill problem (an MLP 32-128-128-4 with AdamW and a counter per sample); odd
seeds run with ``deterministic=True``. Every drill must complete, count every sample
exactly once per epoch, end on the undisturbed run's weights (``torch.equal`` when
deterministic, within a relative 1e-4 otherwise), verify every recovery's state, and
name every fault in a recovery or a ``worker-lost``/``worker-hung`` event.

``--models cnn,transformer``: the realistic problems of
:mod:`ft_notebook.testing.drill_models` instead (a CNN with BatchNorm, dropout and random
augmentation on scikit-learn's digits; a causal transformer with dropout on text read
from disk; each with an LR schedule, gradient clipping and an eval_fn), taking turns
seed by seed; each drill is also checked on the whole state_dict (BatchNorm's running
statistics included) and on the eval_fn's value against the undisturbed run's. Saved
to ``results/drills-realistic.json``.

``--baseline N``: N default-mode seeds run twice more on the bare MLP (no counters,
the issue's own run), with ``ft-notebook.train.ordered-sums`` false (one float32 slice
per rank, the arithmetic before) and true, to show what the drills catch.

Saves every drill's checks to ``benchmarks/results/drills.json`` (the baseline as a
table of its own); one line per drill on stderr.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import Goal, Table, save


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def references(client: Any, work: Path, counters: bool, model: str = "mlp") -> dict[bool, Any]:
    from ft_notebook.testing.training_chaos import reference_weights

    return {
        d: reference_weights(
            client,
            name=f"reference-{model}-{int(d)}-{int(counters)}-{time.time_ns()}",
            store=str(work / "references"),
            deterministic=d,
            counters=counters,
            model=model,
        )
        for d in ((False, True) if counters else (False,))
    }


def drills(
    client: Any,
    work: Path,
    seeds: list[int],
    counters: bool,
    tag: str,
    models: tuple[str, ...] = ("mlp",),
) -> list[Any]:
    """One drill per seed, the models taking turns."""
    from ft_notebook.testing.training_chaos import draw_faults, run_drill

    refs = {m: references(client, work, counters, m) for m in models}
    results = []
    for i, seed in enumerate(seeds):
        plan = draw_faults(seed, 256)
        if not counters and plan.deterministic:
            continue
        model = models[i % len(models)]
        result = run_drill(
            client,
            plan,
            refs[model][plan.deterministic],
            name=f"drill-{tag}-{model}-{seed}",
            store=str(work / "drills"),
            counters=counters,
            model=model,
        )
        log(
            f"{'ok ' if result.ok else 'BAD'} {tag} {model} {result.seconds:5.1f} s "
            f"{result.describe()}"
        )
        results.append(result)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--drills", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--baseline", type=int, default=0, help="default-mode seeds, both sums")
    parser.add_argument(
        "--models", default="mlp", help="mlp (default), or cnn,transformer taking turns"
    )
    args = parser.parse_args()
    models = tuple(args.models.split(","))
    realistic = models != ("mlp",)

    work = Path(tempfile.mkdtemp(prefix="ft-bench-drills-"))
    os.environ["DASK_FT_NOTEBOOK__DATA_DIR"] = str(work / "data")
    import dask.config

    from ft_notebook.config import reload_config
    from ft_notebook.testing import training_cluster

    reload_config()
    started = time.monotonic()
    seeds = list(range(args.first_seed, args.first_seed + args.drills))
    tables: list[Table] = []
    with training_cluster(3, silence_logs=int(os.environ.get("BENCH_LOG_LEVEL", 50))) as client:
        results = drills(client, work, seeds, counters=True, tag="f64", models=models)
        elapsed = time.monotonic() - started
        tables.append(table(results, elapsed, args, models))
        if args.baseline and not realistic:
            base_seeds = [s for s in range(args.first_seed, 10**6) if s % 2 == 0][: args.baseline]
            arms = {}
            for float64 in (False, True):
                with dask.config.set({"ft-notebook.train.ordered-sums": float64}):
                    reload_config()
                    t0 = time.monotonic()
                    tag = "f64-bare" if float64 else "f32-bare"
                    arms[float64] = (drills(client, work, base_seeds, False, tag), t0)
                reload_config()
            tables.append(baseline_table(arms))
    if realistic:
        save("drills-realistic", "Chaos drills on realistic models", tables)
    else:
        save("drills", "Chaos drills: random faults against ft.fit", tables)
    log(f"total {time.monotonic() - started:.0f} s")


def table(
    results: list[Any], elapsed: float, args: argparse.Namespace, models: tuple[str, ...]
) -> Table:
    struck = collections.Counter(kind for r in results for kind, _, _ in r.struck)
    default = [r for r in results if not r.plan.deterministic]
    exact = [r for r in results if r.plan.deterministic]
    recoveries = sum(len(r.recoveries) for r in results)
    repairs = sum(r.repairs for r in results)
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(struck.items()))
    every = Goal("value", "==", 1, stat="all")
    none = Goal("value", "==", 0, stat="all")
    realistic = models != ("mlp",)
    problems = (
        "a CNN with BatchNorm, dropout and random augmentation on scikit-learn's digits and "
        "a causal transformer with dropout on text read from disk, taking turns (AdamW, a "
        "cosine LR schedule, gradient clipping at 1.0, an eval_fn every 64 steps; compared "
        "on the whole state_dict, buffers included, and on the eval_fn's value). "
        if realistic
        else ""
    )
    t = Table(
        "drills-realistic" if realistic else "drills",
        "Chaos drills on realistic models" if realistic else "Chaos drills",
        problems + f"{len(results)} drills on 3 worker processes (LocalCluster), seeds "
        f"{args.first_seed}-{args.first_seed + args.drills - 1}: {len(default)} default-mode "
        f"and {len(exact)} deterministic runs of 256 steps (2 epochs), each checked against "
        f"an undisturbed run. {sum(struck.values())} faults struck ({kinds or 'none'}), "
        f"{recoveries} recoveries; the self-check repaired {repairs} states.",
    )
    if default:
        t.row(
            "distance from the undisturbed run, default mode",
            "",
            [r.distance for r in default],
            goal=Goal("value", "<=", 1e-4, stat="all"),
            detail="max |w - w_ref| / max |w_ref|",
        )
    if exact:
        t.row(
            "bit-identical to the undisturbed run, deterministic",
            "bool",
            [int(r.identical) for r in exact],
            goal=every,
        )
    if realistic:
        t.row(
            "eval_fn value off the undisturbed run's",
            "",
            [r.metric_gap for r in results],
            goal=Goal("value", "<=", 0.01, stat="all"),
            detail="accuracy (CNN) or held-out loss (transformer); 0 when deterministic",
        )
    t.row(
        "samples not used exactly once per epoch",
        "count",
        [r.counts_off for r in results],
        goal=none,
    )
    t.row(
        "faults named in no recovery and no event",
        "count",
        [len(r.unseen) for r in results],
        goal=none,
    )
    doubles = [r for r in results if any(k == "double-kill" for k, _s, _v in r.struck)]
    if doubles:
        t.row(
            "double kills: every worker back in the run before it ended",
            "bool",
            [int(r.world_back_after is not None) for r in doubles],
            goal=every,
            detail="a progress point with world size 3 after the last fault (issue 37)",
        )
    t.row("run COMPLETED", "bool", [int(r.state == "COMPLETED") for r in results], goal=every)
    t.row("every recovery verified", "bool", [int(r.verified) for r in results], goal=every)
    t.row("drill passing every check", "bool", [int(r.ok) for r in results], goal=every)
    wanted = 100 if realistic else 200
    t.row("drills run", "count", [len(results)], goal=Goal("value", ">=", wanted, stat="sum"))
    t.row("time for all the drills", "s", [elapsed], goal=Goal("value", "<", 3600, stat="sum"))
    return t


def baseline_table(arms: dict[bool, tuple[list[Any], float]]) -> Table:
    seeds = ", ".join(str(r.plan.seed) for r in arms[False][0])
    t = Table(
        "drills-baseline",
        "What the drills catch: the arithmetic before float64 sums",
        f"The same faults on the issue's bare MLP (no counters), default mode, seeds {seeds}, "
        "once with `ft-notebook.train.ordered-sums: false` (each rank sums its own float32 "
        "slice, in an order that depends on the world size) and once with the float64 parts.",
    )
    t.row(
        "distance from the undisturbed run, float64 parts",
        "",
        [r.distance for r in arms[True][0]],
        reference=[r.distance for r in arms[False][0]],
        reference_name="float32 slices, before",
        goal=Goal("value", "<=", 1e-4, stat="all"),
        detail="max |w - w_ref| / max |w_ref|, the same seeds",
    )
    return t


if __name__ == "__main__":
    main()
