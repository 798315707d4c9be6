"""Random fault drills against ``ft.fit``: many seeds of
:mod:`ft_notebook.testing.training_chaos`, each checked against an undisturbed run.

    .venv/bin/python benchmarks/bench_drills.py [--drills 200] [--first-seed 0] [--baseline 20]

A LocalCluster of 3 worker processes (the tests' ``training_cluster``: nannies, one
thread each, torch preloaded, Dask's lost-worker-timeout raised). Seed ``s`` draws
1-3 faults (SIGKILL of a member, of rank 0, of two at once, during a recovery, of a
restarted worker while it warms up; SIGSTOP hangs) at random steps of a 256-step run
of the drill problem (an MLP 32-128-128-4 with AdamW and a counter per sample); odd
seeds run with ``deterministic=True``. Every drill must complete, count every sample
exactly once per epoch, end on the undisturbed run's weights (``torch.equal`` when
deterministic, within a relative 1e-4 otherwise), verify every recovery's state, and
name every fault in a recovery or a ``worker-lost``/``worker-hung`` event.

``--baseline N``: N default-mode seeds run twice more on the bare MLP (no counters,
the issue's own run), with ``ft-notebook.train.float64-sums`` false (one float32 slice
per rank, the arithmetic before) and true, to show what the drills catch.

Prints Markdown rows for BENCHMARKS.md on stdout; one line per drill on stderr.
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

from _common import row


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def references(client: Any, work: Path, counters: bool) -> dict[bool, Any]:
    from ft_notebook.testing.training_chaos import reference_weights

    return {
        d: reference_weights(
            client,
            name=f"reference-{int(d)}-{int(counters)}-{time.time_ns()}",
            store=str(work / "references"),
            deterministic=d,
            counters=counters,
        )
        for d in ((False, True) if counters else (False,))
    }


def drills(client: Any, work: Path, seeds: list[int], counters: bool, tag: str) -> list[Any]:
    from ft_notebook.testing.training_chaos import draw_faults, run_drill

    refs = references(client, work, counters)
    results = []
    for seed in seeds:
        plan = draw_faults(seed, 256)
        if not counters and plan.deterministic:
            continue
        result = run_drill(
            client,
            plan,
            refs[plan.deterministic],
            name=f"drill-{tag}-{seed}",
            store=str(work / "drills"),
            counters=counters,
        )
        log(f"{'ok ' if result.ok else 'BAD'} {tag} {result.seconds:5.1f} s {result.describe()}")
        results.append(result)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--drills", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--baseline", type=int, default=0, help="default-mode seeds, both sums")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ft-bench-drills-"))
    os.environ["DASK_FT_NOTEBOOK__DATA_DIR"] = str(work / "data")
    import dask.config

    from ft_notebook.config import reload_config
    from ft_notebook.testing import training_cluster

    reload_config()
    started = time.monotonic()
    seeds = list(range(args.first_seed, args.first_seed + args.drills))
    lines: list[str] = []
    with training_cluster(3, silence_logs=int(os.environ.get("BENCH_LOG_LEVEL", 50))) as client:
        results = drills(client, work, seeds, counters=True, tag="f64")
        elapsed = time.monotonic() - started
        lines += table(results, elapsed, args)
        if args.baseline:
            base_seeds = [s for s in range(args.first_seed, 10**6) if s % 2 == 0][: args.baseline]
            arms = {}
            for float64 in (False, True):
                with dask.config.set({"ft-notebook.train.float64-sums": float64}):
                    reload_config()
                    t0 = time.monotonic()
                    tag = "f64-bare" if float64 else "f32-bare"
                    arms[float64] = (drills(client, work, base_seeds, False, tag), t0)
                reload_config()
            lines += baseline_table(arms)
    for text in lines:
        print(text, flush=True)
    log(f"total {time.monotonic() - started:.0f} s")


def table(results: list[Any], elapsed: float, args: argparse.Namespace) -> list[str]:
    struck = collections.Counter(kind for r in results for kind, _, _ in r.struck)
    default = [r for r in results if not r.plan.deterministic]
    exact = [r for r in results if r.plan.deterministic]
    outside = sum(1 for r in default if r.distance > 1e-4)
    not_identical = sum(1 for r in exact if not r.identical)
    worst = max((r.distance for r in default), default=0.0)
    counts_off = sum(1 for r in results if r.counts_off)
    unseen = sum(len(r.unseen) for r in results)
    failed = sum(1 for r in results if r.state != "COMPLETED")
    unverified = sum(1 for r in results if not r.verified)
    repairs = sum(r.repairs for r in results)
    recoveries = sum(len(r.recoveries) for r in results)
    ok = sum(1 for r in results if r.ok)
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(struck.items()))
    goal_met = "yes" if ok == len(results) and len(results) >= 200 and elapsed < 3600 else "no"
    return [
        f"\nChaos drills: `benchmarks/bench_drills.py --drills {args.drills} --first-seed "
        f"{args.first_seed}`, 3 worker processes (LocalCluster), seeds "
        f"{args.first_seed}-{args.first_seed + args.drills - 1}, {len(default)} default-mode "
        f"and {len(exact)} deterministic runs of 256 steps, {sum(struck.values())} faults "
        f"struck ({kinds}), {recoveries} recoveries, {elapsed / 60:.1f} min in all\n",
        row("measure", "value", "goal", "met"),
        row("---", "---", "---", "---"),
        row(
            "default-mode runs outside 1e-4 of the undisturbed run",
            f"{outside} of {len(default)} (largest distance {worst:.3g})",
            "0",
            "yes" if outside == 0 else "no",
        ),
        row(
            "deterministic runs not bit-identical",
            f"{not_identical} of {len(exact)}",
            "0",
            "yes" if not not_identical else "no",
        ),
        row(
            "runs with a sample not used exactly once per epoch", counts_off, "0", _met(counts_off)
        ),
        row("faults named in no recovery and no event", unseen, "0", _met(unseen)),
        row("runs not COMPLETED", failed, "0", _met(failed)),
        row("runs with a recovery not verified", unverified, "0", _met(unverified)),
        row("states repaired by the self-check", repairs, "(context)", ""),
        row(
            "drills passing every check",
            f"{ok} of {len(results)} in {elapsed / 60:.1f} min",
            ">= 200 drills, all pass, < 60 min",
            goal_met,
        ),
    ]


def baseline_table(arms: dict[bool, tuple[list[Any], float]]) -> list[str]:
    lines = [
        "\nThe same faults on the issue's bare MLP (no counters), default mode, seeds "
        f"{', '.join(str(r.plan.seed) for r in arms[False][0])}:\n",
        row("arithmetic", "runs outside 1e-4", "largest distance", "distances above 1e-6"),
        row("---", "---", "---", "---"),
    ]
    for float64, label in ((False, "float32 slice per rank (before)"), (True, "float64 parts")):
        results = arms[float64][0]
        far = [r.distance for r in results if r.distance > 1e-4]
        above = sorted(f"{r.distance:.3g}" for r in results if r.distance > 1e-6)
        worst = max((r.distance for r in results), default=0.0)
        lines.append(
            row(label, f"{len(far)} of {len(results)}", f"{worst:.3g}", ", ".join(above) or "none")
        )
    return lines


def _met(count: int) -> str:
    return "yes" if count == 0 else "no"


if __name__ == "__main__":
    main()
