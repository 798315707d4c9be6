"""``ft.fit`` against torchft side by side: steady throughput, recovery from a SIGKILL,
and a restarted replica training again.

    .venv/bin/python benchmarks/bench_torchft.py [--kills 10] [--steps 4000]

Both arms train the drill problem (``ft_notebook.testing.training_chaos``: an MLP
32-128-128-4, AdamW lr 1e-3, 12,288 samples, a global batch of 96) on 3 CPU
processes with gloo and one torch thread each.

- **torchft 0.2.0** (installed on first use into ``benchmarks/.venv-torchft``, which
  sees this project's torch): a Lighthouse with its fastest documented settings
  (quorum tick 10 ms, join timeout 100 ms, heartbeat timeout 500 ms) and 3 replica
  groups of one process each (``_torchft_replica.py``: Manager with 100 ms
  heartbeats, a 1 s timeout for collectives and RPCs, DDP and OptimizerWrapper).
  A killed replica is started again at once, as torchelastic would.
- **ft.fit** on a plain ``LocalCluster(n_workers=3, threads_per_worker=1)``, as a
  user would start it (with Dask's ``lost-worker-timeout`` raised, see the README);
  its nanny restarts a killed worker.

Each of ``--kills`` runs SIGKILLs one replica (a random one, at a random step past
``--kill-from``). Measured: steady steps/s before the kill; the time from the kill to
the first step committed by the two survivors; steps lost (the newest committed step
before the kill minus the step the survivors went on from); and for the restarted
one, from the point it is ready to train (torchft: its process has built the model,
optimizer and Manager; ft: its rank has built them, the same point) to its first step
trained with the others, and for ft also from its worker registering with the
scheduler. Every run's figures
are saved to ``results/torchft.json`` (``_report.py``), ft.fit against torchft (ratios
of the medians: the arms run one after the other, not in pairs); details on stderr.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import poll
from _report import Goal, Table, save

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV = HERE / ".venv-torchft"
TORCHFT = "torchft==0.2.0"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def torchft_python() -> Path:
    """The torchft venv's Python, made on first use: this project's site-packages on
    its path (one torch), torchft and its OpenTelemetry dependencies in its own."""
    from _peers import peer_python

    return Path(peer_python(VENV, TORCHFT, "torchft"))


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---- torchft


LIGHTHOUSE = """
import sys, time
from torchft.coordination import LighthouseServer
server = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=100,
                          quorum_tick_ms=10, heartbeat_timeout_ms=500)
print(server.address(), flush=True)
sys.stdin.read()
"""


def torchft_run(python: Path, args: argparse.Namespace, work: Path, index: int) -> dict[str, Any]:
    rng = random.Random(1000 + index)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    procs: list[subprocess.Popen[str]] = []
    lighthouse = subprocess.Popen(
        [str(python), "-c", LIGHTHOUSE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert lighthouse.stdout is not None
        address = lighthouse.stdout.readline().strip()
        outs = [work / f"tf-{index}-{r}.jsonl" for r in range(3)]

        def start(replica: int) -> subprocess.Popen[str]:
            cmd = [str(python), str(HERE / "_torchft_replica.py"), "--replica", str(replica)]
            cmd += ["--lighthouse", address, "--out", str(outs[replica])]
            cmd += ["--steps", str(args.steps), "--delay", str(args.delay)]
            log_file = open(work / f"tf-{index}-{replica}.log", "a")  # noqa: SIM115
            proc = subprocess.Popen(cmd, env=env, stdout=log_file, stderr=log_file, text=True)
            procs.append(proc)
            return proc

        replicas = [start(r) for r in range(3)]
        kill_at = rng.randrange(args.kill_from, args.kill_from + 100)
        victim = rng.randrange(3)

        def reached() -> bool:
            for r, proc in enumerate(replicas):
                if proc.poll() is not None:
                    log_text = (work / f"tf-{index}-{r}.log").read_text()[-2000:]
                    raise RuntimeError(f"torchft replica {r} exited:\n{log_text}")
            rs = [r for r in records(outs[0]) if "step" in r]
            return bool(rs) and rs[-1]["step"] >= kill_at

        poll(reached, 300, f"torchft step {kill_at}")
        before = {r: [x for x in records(outs[r]) if "step" in x] for r in range(3)}
        newest = max(x["step"] for rs in before.values() for x in rs if x["committed"])
        killed_at = time.time()
        os.kill(replicas[victim].pid, signal.SIGKILL)
        replicas[victim].wait()
        start(victim)  # at once, as torchelastic would
        survivors = [r for r in range(3) if r != victim]

        def recovered() -> dict[str, Any] | None:
            for r in survivors:
                for x in records(outs[r]):
                    two = x.get("participants") == 2
                    if "step" in x and x["t"] > killed_at and x["committed"] and two:
                        return x
            return None

        first = poll(recovered, 60, "torchft survivors' first committed step")

        def rejoined() -> dict[str, Any] | None:
            rs = [x for x in records(outs[victim]) if "t" in x and x["t"] > killed_at]
            return next((x for x in rs if x["committed"] and x["participants"] == 3), None)

        back = poll(rejoined, 120, "the restarted torchft replica training")
        ready = [
            x["ready"] for x in records(outs[victim]) if "ready" in x and x["ready"] > killed_at
        ]
        steady = steady_rate([x for x in before[survivors[0]] if x["committed"]], 10)
        result = {
            "rto_s": first["t"] - killed_at,
            "steps_lost": max(0, newest - (first["step"] - 1)),
            "rejoin_s": back["t"] - ready[0],
            "kill_to_training_s": back["t"] - killed_at,
            "steps_per_s": steady,
            "went_on": True,
        }
        log(f"  torchft run {index}: kill at step {kill_at} of replica {victim}: {result}")
        return result
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        lighthouse.kill()
        lighthouse.wait()


def steady_rate(points: list[dict[str, Any]], skip: int) -> float | None:
    """Steps per second over the points from step ``skip``; None when fewer than two
    were there to measure (the kill came first): not a rate of 0."""
    window = [p for p in points if p["step"] >= skip]
    if len(window) < 2:
        return None
    return (window[-1]["step"] - window[0]["step"]) / (window[-1]["t"] - window[0]["t"])


# ---- ft.fit


def ft_runs(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    import dask.config
    from distributed import Client, LocalCluster

    from ft_notebook.cluster.chaos import kill_worker
    from ft_notebook.testing.training_chaos import drill_problem
    from ft_notebook.train import fit

    out = []
    with (
        dask.config.set({"distributed.deploy.lost-worker-timeout": "1h"}),
        LocalCluster(
            n_workers=3, threads_per_worker=1, dashboard_address="127.0.0.1:0", silence_logs=50
        ) as cluster,
        Client(cluster) as client,
    ):
        epochs = -(-args.steps // 128)
        for index in range(args.kills):
            rng = random.Random(2000 + index)
            poll(lambda: len(client.scheduler_info(n_workers=-1)["workers"]) == 3, 120, "3")
            run = fit(
                epochs=epochs,
                cluster=client,
                name=f"ft-{index}-{time.time_ns()}",
                store=str(work / "ft-store"),
                checkpoint_every=10_000,
                min_workers=1,
                wait=False,
                **drill_problem(counters=False, delay_s=args.delay),
            )
            kill_at = rng.randrange(args.kill_from, args.kill_from + 100)
            info = poll(functools.partial(_at, run, kill_at), 300, f"ft step {kill_at}")
            victim = str(rng.choice(info["members"]))
            history = list(info["history"])
            killed_at = time.time()
            kill_worker(client, victim)
            joined = poll(functools.partial(_joins, run), 120, "the restarted ft worker back")
            run.cancel()
            info = run.info()
            recovery = info["recoveries"][0]
            join = joined[0]
            steady = [
                {"step": h["step"], "t": h["time"], "committed": True}
                for h in history
                if h.get("world_size") == 3
            ]
            result = {
                "rto_s": recovery["resumed_at"] - killed_at,
                "steps_lost": recovery["steps_lost"],
                "rejoin_s": join["rejoin_s"],
                "from_ready_s": join["from_ready_s"],
                "kill_to_training_s": join["trained_at"] - killed_at,
                "steps_per_s": steady_rate(steady, 10),
                "went_on": True,
            }
            log(f"  ft run {index}: kill at step {kill_at} of worker {victim}: {result}")
            out.append(result)
    return out


def _at(run: Any, step: int) -> dict[str, Any] | None:
    info: dict[str, Any] = run.info()
    return info if info["step"] >= step and info["state"] == "RUNNING" else None


def _joins(run: Any) -> list[dict[str, Any]]:
    return list(run.info()["joins"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--steps", type=int, default=4000, help="long enough to rejoin")
    parser.add_argument("--kill-from", type=int, default=60)
    parser.add_argument("--delay", type=float, default=0.0, help="data fetch time per step")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ft-bench-torchft-"))
    os.environ["DASK_FT_NOTEBOOK__DATA_DIR"] = str(work / "data")
    from ft_notebook.config import reload_config

    reload_config()
    python = torchft_python()
    started = time.monotonic()
    tf, ours = [], []
    for index in range(args.kills):  # torchft first, then ft: no cluster idles beside it
        tf.append(torchft_run(python, args, work, index))
    ours = ft_runs(args, work)
    save("torchft", "ft.fit against torchft", [table(tf, ours, args)])
    log(f"total {time.monotonic() - started:.0f} s")


def table(tf: list[dict[str, Any]], ours: list[dict[str, Any]], args: argparse.Namespace) -> Table:
    def of(rs: list[dict[str, Any]], key: str) -> list[float]:
        return [r[key] for r in rs]

    t = Table(
        "side-by-side",
        "Recovery and rejoin next to torchft 0.2.0",
        f"{TORCHFT.replace('==', ' ')} (its Lighthouse at the fastest documented settings) "
        f"and `ft.fit` (a plain LocalCluster, its nanny restarting the killed worker) train "
        f"the drill MLP (32-128-128-4, AdamW, global batch 96, {args.steps} steps) on 3 CPU "
        f"processes with gloo; {args.kills} runs each, one SIGKILL of a random member per "
        f"run at a random step from {args.kill_from}, the killed one started again at once"
        + (f", {args.delay:g} s data fetch per step" if args.delay else "")
        + "; all torchft runs first, then the ft.fit runs.",
    )
    tf_name = "torchft"
    t.row(
        "SIGKILL → first step committed by the survivors",
        "s",
        of(ours, "rto_s"),
        reference=of(tf, "rto_s"),
        reference_name=tf_name,
        goal=Goal("ratio", "<=", 0.5),
    )
    t.row(
        "steps lost",
        "count",
        of(ours, "steps_lost"),
        goal=Goal("value", "==", 0, stat="all"),
        detail=f"torchft: at most {max(of(tf, 'steps_lost')):g}",
    )
    t.row(
        "restarted worker: ready to train → training again",
        "s",
        of(ours, "from_ready_s"),
        reference=of(tf, "rejoin_s"),
        reference_name=tf_name,
        goal=Goal("ratio", "<=", 1.0),
    )
    t.row(
        "restarted worker: registered → training again",
        "s",
        of(ours, "rejoin_s"),
        goal=Goal("value", "<=", 2.0),
    )
    t.row(
        "SIGKILL → the restarted one training again",
        "s",
        of(ours, "kill_to_training_s"),
        reference=of(tf, "kill_to_training_s"),
        reference_name=tf_name,
    )
    rates = {
        name: [r for r in of(rs, "steps_per_s") if r] for name, rs in (("ft", ours), ("tf", tf))
    }
    if rates["ft"] and rates["tf"]:
        unmeasured = 2 * args.kills - len(rates["ft"]) - len(rates["tf"])
        t.row(
            "steady steps/s before the kill",
            "steps/s",
            rates["ft"],
            reference=rates["tf"],
            reference_name=tf_name,
            goal=Goal("ratio", ">=", 1.0),
            detail=f"{unmeasured} runs killed too early to measure" if unmeasured else "",
        )
    else:
        log("steady steps/s: no run of one arm had two steps before its kill; row left out")
    return t


if __name__ == "__main__":
    main()
