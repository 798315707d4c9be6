"""``ft.fit`` against plain ``torchrun`` DDP, and its recovery time after a SIGKILL.

    .venv/bin/python benchmarks/bench_train.py [--pairs 5] [--rto-runs 10] [--quick]

1. Throughput: steady-state samples/s of ``ft.fit`` on a LocalCluster of 2 worker
   processes (1 thread each, heartbeats every 200 ms) against ``torchrun
   --nproc_per_node=2`` DDP (gloo, CPU, ``benchmarks/_ddp_reference.py``) of the same
   MLP (``ft_notebook.testing.training.mlp``), data (``regression_problem``'s tensors
   as a TensorDataset, indexed by the same per-epoch permutation), Adam (lr 1e-2) and
   global batch, split in halves; one torch thread per process in both arms. Every
   ft run has a fresh cluster of its own (its start is not timed), closed before the
   next arm: an idle LocalCluster of 2 takes about 10% of a core (scheduler, nannies,
   heartbeats), which would slow the torchrun arm. The first ``--warmup`` steps are
   skipped: ft's rate is taken from the run's history (progress points of rank 0),
   torchrun's from rank 0's wall time after every step. The arms alternate
   (``--pairs`` rounds); the ratio is the median of the per-round ratios. A third
   arm, ft with ``checkpoint_every=50`` (an asynchronous durable checkpoint every 50
   steps; the first arm saves only at the end), is context.
2. Recovery time: 3 workers train ``counting_problem`` (steps paced to about 25 ms);
   once the run has passed a random step, one of its members, chosen at random, is
   SIGKILLed (``os.kill`` of the worker process, whose nanny starts a fresh one).
   RTO is the time from just before the kill to the ``resumed_at`` of the run's
   recovery (rank 0's first committed step with the 2 survivors). ``fast_recovery``
   True and False alternate, ``--rto-runs`` runs each; between runs the script waits
   (polling, with a deadline) until the cluster has 3 workers again. After every
   run the trained counts are checked: every sample used exactly once.
3. Hang and rejoin: the same with SIGSTOP on a cluster with ft's default heartbeat
   and hang threshold; time from the stop to the survivors' first committed step,
   and from the evicted worker's restart (its nanny's) to training again.

Saves every raw sample to ``benchmarks/results/train.json`` (``train-cuda.json`` with
``--device cuda``), one table per part, so ``--only`` refreshes only its own; per-run
details go to stderr (``BENCH_LOG_LEVEL=20`` shows Dask's own log too). Uses a
temporary data folder and checkpoint store, never the user's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from _common import poll
from _report import Goal, Table, save

HERE = Path(__file__).parent
REFERENCE = HERE / "_ddp_reference.py"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


#: How the benchmark's nannies start worker processes (--worker-start).
WORKER_START = ["forkserver"]


def start_cluster(n: int, heartbeat: str = "200ms") -> tuple[contextlib.ExitStack, Any]:
    """The tests' training cluster (nannies, torch preloaded, Dask's lost-worker-timeout
    raised), one torch thread per worker, its workers started as ``ft.cluster()``
    starts them (forked, unless --worker-start spawn); close the stack to stop it."""
    from ft_notebook.testing import training_cluster

    stack = contextlib.ExitStack()
    client = stack.enter_context(
        training_cluster(
            n,
            heartbeat=heartbeat,
            worker_start=WORKER_START[0],
            env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
            silence_logs=int(os.environ.get("BENCH_LOG_LEVEL", 40)),
        )
    )
    return stack, client


def worker_count(client: Any) -> int:
    return len(client.scheduler_info(n_workers=-1)["workers"])


# ---- 1. throughput


def steady_rate(points: list[tuple[int, float]], warmup: int, batch: int) -> tuple[float, int, int]:
    """samples/s between the first point at or after ``warmup`` and the last point."""
    window = [(s, t) for s, t in points if s >= warmup]
    if len(window) < 2 or window[-1][1] <= window[0][1]:
        raise RuntimeError(f"too few points after step {warmup}: {points[-5:]}")
    (s0, t0), (s1, t1) = window[0], window[-1]
    return (s1 - s0) / (t1 - t0) * batch, s0, s1


def bench_throughput(args: argparse.Namespace, work: Path) -> list[Table]:
    import torch
    from torch.utils.data import TensorDataset

    from ft_notebook.testing.training import regression_problem
    from ft_notebook.train import fit

    size = args.batch * args.steps_per_epoch
    epochs = -(-args.steps // args.steps_per_epoch)
    steps = epochs * args.steps_per_epoch
    problem = regression_problem(
        size=size, batch=args.batch, features=args.features, hidden=args.hidden
    )
    problem["data"] = TensorDataset(*problem["data"].tensors)
    checked: list[bool] = []

    def ft_arm(checkpoint_every: int, ordered_sums: bool = True) -> dict[str, float]:
        import dask.config

        from ft_notebook.config import reload_config

        # a cluster of its own: none runs beside the torchrun arm
        cluster, client = start_cluster(args.workers)
        with cluster, dask.config.set({"ft-notebook.train.ordered-sums": ordered_sums}):
            reload_config()  # fit reads its settings once per process otherwise
            try:
                return ft_run(client, checkpoint_every)
            finally:
                reload_config()

    def ft_run(client: Any, checkpoint_every: int) -> dict[str, float]:
        if not checked:
            threads = client.run(lambda: (torch.get_num_threads(), os.environ["OMP_NUM_THREADS"]))
            log(f"ft workers' (torch threads, OMP_NUM_THREADS): {sorted(threads.values())}")
            checked.append(True)
        name = f"bench-tp-{uuid.uuid4().hex[:6]}"
        run = fit(
            **problem,
            epochs=epochs,
            cluster=client,
            name=name,
            store=str(work / "store"),
            checkpoint_every=checkpoint_every,
            device=args.device,
            amp=args.amp,
            wait=True,
            timeout=600,
        )
        info = run.info()
        if info["state"] != "COMPLETED" or info["step"] != steps:
            raise RuntimeError(f"ft run {name}: {info['state']} at step {info['step']}/{steps}")
        points = [
            (h["step"], h["time"]) for h in info["history"] if h["world_size"] == args.workers
        ]
        for line in "\n".join(run.logs().values()).splitlines():
            if "training paused" in line:  # what a checkpoint held training up
                log(f"    {line}")
        rate, s0, s1 = steady_rate(points, args.warmup, args.batch)
        log(
            f"  ft (checkpoint_every={checkpoint_every}): {rate:.0f} samples/s, steps {s0}-{s1}, "
            f"{len(points)} history points, loss {info['loss']}"
        )
        return {"rate": rate, "ms": args.batch / rate * 1e3}

    def torchrun_arm() -> dict[str, float]:
        out = work / f"ddp-{uuid.uuid4().hex[:6]}.json"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={args.workers}",
            str(REFERENCE),
            "--device",
            args.device,
            *(["--amp"] if args.amp else []),
            "--size",
            str(size),
            "--batch",
            str(args.batch),
            "--features",
            str(args.features),
            "--hidden",
            str(args.hidden),
            "--epochs",
            str(epochs),
            "--out",
            str(out),
        ]
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"torchrun failed ({done.returncode}):\n{done.stderr[-3000:]}")
        result = json.loads(out.read_text())
        times = result["times"]  # times[k]: after step k (times[0]: before the first)
        rate, s0, s1 = steady_rate(list(enumerate(times)), args.warmup, args.batch)
        log(f"  torchrun: {rate:.0f} samples/s, steps {s0}-{s1}, loss {result['loss']:.4g}")
        return {"rate": rate, "ms": args.batch / rate * 1e3}

    arms = {
        "ft": lambda: ft_arm(checkpoint_every=10 * steps),
        "torchrun": torchrun_arm,
        "ft-ckpt": lambda: ft_arm(checkpoint_every=50),
        # the arithmetic before float64 sums: one float32 slice per rank
        "ft-f32": lambda: ft_arm(checkpoint_every=10 * steps, ordered_sums=False),
    }
    arms = {k: v for k, v in arms.items() if k in args.arms.split(",")}
    results: dict[str, list[dict[str, float]]] = {k: [] for k in arms}
    for pair in range(args.pairs):
        log(f"throughput round {pair + 1}/{args.pairs}")
        for key, arm in arms.items():
            results[key].append(arm())

    if "torchrun" not in arms:
        log("no torchrun arm: nothing to compare, no table saved (the rates are above)")
        return []
    ref = [r["rate"] for r in results["torchrun"]]
    params = sum(p.numel() for p in problem["model"]().parameters())
    where = (
        "gloo, CPU"
        if args.device == "cpu"
        else f"NCCL, {args.device}{', bf16 autocast' if args.amp else ''}"
    )
    table = Table(
        "throughput",
        "Throughput against torchrun DDP",
        f"`ft.fit` on {args.workers} worker process(es) x 1 thread against `torchrun "
        f"--nproc_per_node={args.workers}` DDP ({where}), MLP {args.features}-{args.hidden}-1 "
        f"({params:,} parameters), global batch {args.batch}, steady-state samples/s over "
        f"steps {args.warmup}-{steps}. The arms alternate, {args.pairs} rounds, each ft run "
        "on a fresh cluster closed before the torchrun arm; the ratio is the median of the "
        "per-round ratios.",
    )
    rows = {
        "ft": ("steady-state throughput, no periodic checkpoints", Goal("ratio", ">=", 0.97)),
        "ft-ckpt": ("the same, with `checkpoint_every=50`", None),
        "ft-f32": ("the same, `ordered-sums: false` (float32 slices)", None),
    }
    for key, (measure, goal) in rows.items():
        if key in results:
            table.row(
                measure,
                "samples/s",
                [r["rate"] for r in results[key]],
                reference=ref,
                reference_name="torchrun DDP",
                ratio="pairs",
                goal=goal,
            )
    return [table] if table.rows else []


# ---- 2. recovery time


def bench_rto(args: argparse.Namespace, work: Path) -> list[Table]:
    import torch

    from ft_notebook.testing.training import counting_problem
    from ft_notebook.train import fit

    batch = 32
    problem = counting_problem(size=batch * args.rto_steps, batch=batch, delay_s=args.delay)
    rng = random.Random(args.seed)
    cluster, client = start_cluster(3)
    results: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    failures: dict[bool, list[str]] = {True: [], False: []}

    def pids() -> dict[str, int]:
        from ft_notebook.cluster._remote import scheduler_workers  # what chaos.kill_worker uses

        return {w["name"]: int(w["pid"]) for w in client.run_on_scheduler(scheduler_workers)}

    def once(fast: bool, index: int) -> dict[str, Any]:
        kill_step = rng.randint(args.kill_from, args.kill_to)
        name = f"bench-rto-{'fast' if fast else 'form'}-{index}-{uuid.uuid4().hex[:4]}"
        run = fit(
            **problem,
            epochs=1,
            cluster=client,
            name=name,
            store=str(work / "store"),
            fast_recovery=fast,
            wait=False,
        )
        try:
            return measure(run, name, kill_step)
        except BaseException:
            with contextlib.suppress(Exception):  # the next run needs the cluster to itself
                run.cancel()
            raise

    def measure(run: Any, name: str, kill_step: int) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            info = run.info()
            if info["state"] in ("COMPLETED", "FAILED", "CANCELLED"):
                raise RuntimeError(f"{name} ended ({info['state']}) before step {kill_step}")
            ok = (
                info["state"] == "RUNNING" and info["world_size"] == 3 and info["step"] >= kill_step
            )
            return info if ok else None

        info = poll(reached, 300, f"{name} reaching step {kill_step}", every_s=0.01)
        victim = rng.choice(sorted(info["members"]))
        pid = pids()[victim]
        at_step = info["step"]
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)

        recovery = poll(lambda: run.info()["recoveries"], 60, f"{name} recovering")[0]
        run.wait(timeout=300)
        final = run.info()
        counts = run.model().counts.detach()
        exact = bool(torch.all(counts == 1.0))
        back = [j for j in final["joins"] if j["name"] == victim and j["trained_at"] > t_kill]
        result = {
            # the killed worker's replacement: None when it did not train before the end
            "replaced": back[0]["trained_at"] - t_kill if back else None,
            "rto": recovery["resumed_at"] - t_kill,
            "detect": recovery["detected_at"] - t_kill,
            "reported": recovery["rto_s"],
            "steps_lost": recovery["steps_lost"],
            "how": recovery["how"],
            "after": recovery["workers_after"],
            "recoveries": len(final["recoveries"]),
            "exact": exact,
        }
        log(
            f"  {name}: killed worker {victim} (pid {pid}) at step ~{at_step}: RTO "
            f"{result['rto']:.3f} s (detected after {result['detect']:.3f} s, reported rto_s "
            f"{result['reported']:.3f}), how={result['how']}, workers {recovery['workers_before']}"
            f"->{result['after']}, replacement training {result['replaced']} s after the kill, "
            f"steps_lost={result['steps_lost']}, recoveries="
            f"{result['recoveries']}, final {final['state']} step {final['step']}, counts exact: {exact}"
            + ("" if exact else f" (min {float(counts.min())}, max {float(counts.max())})")
        )
        return result

    def nannies() -> str:
        return ", ".join(
            f"{name}: nanny {w.status.name}, process {'alive' if w.is_alive() else 'not alive'}"
            for name, w in sorted(client.cluster.workers.items(), key=lambda kv: str(kv[0]))
        )

    stopped = ""
    try:
        for index in range(args.rto_runs):
            for fast in (True, False):
                try:
                    poll(lambda: worker_count(client) == 3, 120, "3 workers back", every_s=0.1)
                except TimeoutError as e:
                    from ft_notebook.cluster._remote import scheduler_workers

                    stopped = f"{e} (scheduler: {client.run_on_scheduler(scheduler_workers)}; {nannies()})"
                    log(f"  stopping the recovery runs: {stopped}")
                    break
                try:
                    results[fast].append(once(fast, index))
                except Exception as e:
                    failures[fast].append(f"{type(e).__name__}: {e}"[:200])
                    log(f"  run failed: {traceback.format_exc()}")
            if stopped:
                break
    finally:
        cluster.close()

    table = Table(
        "rto",
        "Recovery after a SIGKILL",
        f"SIGKILL of one of 3 workers (1 thread each) of a `counting_problem` run (batch "
        f"{batch}, {args.rto_steps} steps of about {args.delay * 1e3:.0f} ms + overhead), past "
        f"a random step in [{args.kill_from}, {args.kill_to}]; RTO from just before the kill "
        f"to the first step committed by the 2 survivors; {args.rto_runs} runs per mode, the "
        "modes alternating." + (f" The runs stopped early: {stopped[:300]}" if stopped else ""),
    )
    for fast, goal_s in ((True, 0.25), (False, 1.0)):
        rs, mode = results[fast], f"fast_recovery={fast}"
        if rs:
            hows = sorted({r["how"] for r in rs})
            taken = ", ".join(f"{h} {sum(r['how'] == h for r in rs)}" for h in hows)
            detect = statistics.median(r["detect"] for r in rs)
            reported = statistics.median(r["reported"] for r in rs)
            table.row(
                f"RTO, {mode}",
                "s",
                [r["rto"] for r in rs],
                goal=Goal("value", "<=", goal_s),
                detail=f"path taken: {taken}; median detection {detect * 1e3:.0f} ms, "
                f"ft's own rto_s {reported * 1e3:.0f} ms",
            )
            back = [r["replaced"] for r in rs if r["replaced"] is not None]
            if back:  # else none trained before its run ended: the log says so, run by run
                table.row(
                    f"SIGKILL -> the killed worker's replacement training again, {mode}",
                    "s",
                    back,
                    goal=Goal("value", "<=", 1.0),
                    detail=f"workers started by {WORKER_START[0]}; {len(back)} of {len(rs)} "
                    "replacements trained before their run ended",
                )
            table.row(
                f"steps lost, {mode}",
                "count",
                [r["steps_lost"] for r in rs],
                goal=Goal("value", "==", 0, stat="all"),
            )
            table.row(
                f"every sample used exactly once, {mode}",
                "bool",
                [int(r["exact"]) for r in rs],
                goal=Goal("value", "==", 1, stat="all"),
            )
        # one sample per run attempted: 1 recovered and measured, 0 failed
        table.row(
            f"runs recovered, {mode}",
            "bool",
            [1] * len(rs) + [0] * len(failures[fast]) or [0],
            goal=Goal("value", "==", 1, stat="all"),
            detail="; ".join(failures[fast]),
        )
    return [table]


def bench_hang_and_rejoin(args: argparse.Namespace, work: Path) -> list[Table]:
    """SIGSTOP one of 3 workers with ft's default settings (heartbeats every 500 ms,
    hung after 2 s): time from the stop to the survivors' first committed step; then
    the evicted worker's nanny restarts it: time from its arrival to training again."""
    import torch

    from ft_notebook.config import get_config
    from ft_notebook.testing.training import counting_problem
    from ft_notebook.train import fit

    settings = get_config().cluster
    batch, steps = 32, args.hang_steps
    problem = counting_problem(size=batch * steps, batch=batch, delay_s=args.delay)
    rng = random.Random(args.seed + 1)
    heartbeat = f"{int(settings.heartbeat_interval_s * 1000)}ms"
    cluster, client = start_cluster(3, heartbeat=heartbeat)
    stops: list[float] = []
    rejoins: list[float] = []
    exact: list[int] = []  # per run that ended: 1 when every sample was used once
    completed: list[int] = []  # per run: 1 when it completed with the worker rejoined
    failures: list[str] = []
    try:
        for index in range(args.hang_runs):
            poll(lambda: worker_count(client) == 3, 120, "3 workers back", every_s=0.1)
            name = f"bench-hang-{index}-{uuid.uuid4().hex[:4]}"
            run = fit(
                **problem,
                epochs=1,
                cluster=client,
                name=name,
                store=str(work / "store"),
                wait=False,
            )
            try:
                at = rng.randint(args.kill_from, args.kill_to)
                info = poll(
                    lambda run=run, at=at: (
                        (i := run.info())["state"] == "RUNNING"
                        and i["world_size"] == 3
                        and i["step"] >= at
                        and i
                    ),
                    300,
                    f"{name} at step {at}",
                    every_s=0.01,
                )
                from ft_notebook.cluster._remote import scheduler_workers

                victim = rng.choice(sorted(info["members"]))
                pid = {
                    w["name"]: int(w["pid"]) for w in client.run_on_scheduler(scheduler_workers)
                }[victim]
                t_stop = time.time()
                os.kill(pid, signal.SIGSTOP)
                recovery = poll(lambda run=run: run.info()["recoveries"], 60, f"{name} recovering")[
                    0
                ]
                stops.append(recovery["resumed_at"] - t_stop)
                run.wait(timeout=300)
                final = run.info()
                joins = final["joins"]
                rejoins += [j["rejoin_s"] for j in joins]
                ok = bool(torch.all(run.model().counts.detach() == 1.0))
                exact.append(int(ok))
                log(
                    f"  {name}: SIGSTOP {victim} at step ~{info['step']}: survivors trained again "
                    f"{stops[-1]:.3f} s later ({recovery['cause']}); rejoins {[j['rejoin_s'] for j in joins]}; "
                    f"counts exact: {ok}"
                )
                completed.append(int(final["state"] == "COMPLETED" and bool(joins)))
                if not joins:
                    failures.append(f"{name}: the restarted worker did not rejoin before the end")
            except Exception as e:
                completed.append(0)
                failures.append(f"{type(e).__name__}: {e}"[:200])
                log(f"  run failed: {traceback.format_exc()}")
                with contextlib.suppress(Exception):
                    run.cancel()
                with contextlib.suppress(ProcessLookupError, UnboundLocalError):
                    os.kill(pid, signal.SIGCONT)
    finally:
        cluster.close()

    table = Table(
        "hang",
        "Hang and rejoin after a SIGSTOP",
        f"SIGSTOP of one of 3 workers (ft's defaults: heartbeats every {heartbeat}, hung "
        f"after {settings.hung_after_s:g} s) of a `counting_problem` run of {steps} steps, "
        f"{args.hang_runs} runs; the stopped worker is evicted through its nanny, which starts "
        "a fresh one.",
    )
    if stops:
        table.row(
            "SIGSTOP -> first step committed by the survivors",
            "s",
            stops,
            goal=Goal("value", "<=", 2.5),
        )
    if rejoins:
        table.row(
            "restarted worker: arrival -> training again",
            "s",
            rejoins,
            goal=Goal("value", "<=", 3.0),
        )
    if exact:
        table.row(
            "every sample used exactly once",
            "bool",
            exact,
            goal=Goal("value", "==", 1, stat="all"),
        )
    table.row(
        "runs completed with the worker rejoined",
        "bool",
        completed or [0],
        goal=Goal("value", "==", 1, stat="all"),
        detail="; ".join(failures),
    )
    return [table]


def save_tables(args: argparse.Namespace, tables: list[Table]) -> None:
    """GPU figures go to a results file of their own: they never replace the CPU ones."""
    if args.device == "cpu":
        save("train", "Training: ft.fit throughput, recovery, hangs and rejoins", tables)
    else:
        save("train-cuda", "Training on a GPU: ft.fit against torchrun DDP", tables)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=5, help="throughput rounds (default 5)")
    parser.add_argument("--rto-runs", type=int, default=10, help="kills per mode (default 10)")
    parser.add_argument("--quick", action="store_true", help="3 rounds and 3 kills per mode")
    parser.add_argument("--only", choices=("throughput", "rto", "hang"), default=None)
    parser.add_argument("--hang-runs", type=int, default=5, help="SIGSTOP runs (default 5)")
    parser.add_argument("--hang-steps", type=int, default=400, help="steps per SIGSTOP run")
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=512, help="global batch (default 512)")
    parser.add_argument("--steps", type=int, default=200, help="steps per throughput run")
    parser.add_argument("--steps-per-epoch", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=40, help="steps not measured")
    parser.add_argument("--rto-steps", type=int, default=200, help="steps per recovery run")
    parser.add_argument("--delay", type=float, default=0.02, help="data delay per step (s)")
    parser.add_argument("--kill-from", type=int, default=30)
    parser.add_argument("--kill-to", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="throughput: ranks per arm")
    parser.add_argument(
        "--device", default="cpu", help="throughput: 'cpu', or 'cuda' (one GPU per worker)"
    )
    parser.add_argument("--amp", action="store_true", help="throughput: bf16 autocast (cuda)")
    parser.add_argument(
        "--arms",
        default="ft,torchrun,ft-ckpt,ft-f32",
        help="throughput arms (without torchrun nothing is saved)",
    )
    parser.add_argument(
        "--worker-start",
        choices=("forkserver", "spawn"),
        default="forkserver",
        help="how nannies start workers (forkserver: as ft.cluster() does)",
    )
    args = parser.parse_args()
    WORKER_START[0] = args.worker_start
    if args.quick:
        args.pairs, args.rto_runs, args.hang_runs = 3, 3, 2

    work = Path(tempfile.mkdtemp(prefix="ft-bench-train-"))
    os.environ["DASK_FT_NOTEBOOK__DATA_DIR"] = str(work / "data")
    from ft_notebook.config import reload_config

    reload_config()
    started = time.monotonic()
    parts = {"throughput": bench_throughput, "rto": bench_rto, "hang": bench_hang_and_rejoin}
    for key, part in parts.items():
        if args.only in (None, key):
            tables = part(args, work)
            if tables:  # saved part by part: a later failure keeps what was measured
                save_tables(args, tables)
    log(f"total {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
