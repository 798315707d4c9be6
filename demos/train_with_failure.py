"""The main job (``make demo``): training that survives a killed worker.

On your private cluster (``ft.cluster()``: started on first use, TLS, outlives this
process), a small model trains twice: once undisturbed, once with a worker process
SIGKILLed mid-run. The second run goes on with the survivors in a fraction of a
second; the killed worker's nanny restarts it and it rejoins. Then a third run, of a
model whose parameters count how often each sample was trained on, proves that no
sample was lost or used twice. Each step prints what it did.
"""

from __future__ import annotations

import time
from typing import Any


def _kill_mid_run(client: Any, run: Any, at_step: int) -> tuple[str, float]:
    from ft_notebook.cluster.chaos import kill_worker
    from ft_notebook.testing import poll_for

    info = poll_for(
        lambda: (i := run.info())["step"] >= at_step and i["state"] == "RUNNING" and i,
        timeout=300,
        what=f"step {at_step}",
    )
    victim = str(info["members"][-1])
    killed_at = time.time()
    kill_worker(client, victim)
    return victim, killed_at


def main() -> None:
    import ft_notebook as ft
    from ft_notebook.testing.training import counting_problem, regression_problem

    started_here = "default" not in {c.name for c in ft.clusters()}
    t0 = time.perf_counter()
    client = ft.cluster()
    workers = len(client.scheduler_info(n_workers=-1)["workers"])
    print(
        f"1. your cluster {client.scheduler.address}: {workers} workers "
        f"({'started' if started_here else 'already running'}, {time.perf_counter() - t0:.1f} s)"
    )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        problem = regression_problem(size=1024, batch=64, delay_s=0.04)
        baseline = ft.fit(epochs=5, name=f"demo-{stamp}-clean", checkpoint_every=16, **problem)
        clean = baseline.info()
        print(f"2. undisturbed run: {clean['step']} steps, final loss {clean['loss']:.4f}")

        run = ft.fit(
            epochs=5, name=f"demo-{stamp}-killed", checkpoint_every=16, wait=False, **problem
        )
        victim, killed_at = _kill_mid_run(client, run, at_step=12)
        print(f"3. SIGKILLed worker {victim} at step {run.info()['step']}; the run goes on")
        run.wait(timeout=600)
        info = run.info()
        for r in info["recoveries"]:
            print(
                f"   recovery: {r['cause']}\n"
                f"     RTO {r['resumed_at'] - killed_at:.3f} s from the kill to the next "
                f"committed step ({r['how']} path), {r['steps_lost']} committed steps lost, "
                f"workers {r['workers_before']} -> {r['workers_after']}"
            )
        for j in info["joins"]:
            print(
                f"   worker {j['name']} came back (its nanny restarted it) and trained again "
                f"{j['rejoin_s']:.2f} s after it arrived"
            )
        if not any(j["name"] == victim for j in info["joins"]):
            print(f"   {_why_no_rejoin(client, victim, killed_at, info)}")
        sizes = [p["world_size"] for p in info["history"] if p.get("world_size")]
        print(f"   world size over the run: {_runs_of(sizes)}")
        print(f"4. final loss {info['loss']:.4f} with the failure, {clean['loss']:.4f} without")

        counting = ft.fit(
            epochs=3,
            name=f"demo-{stamp}-count",
            wait=False,
            checkpoint_every=8,
            **counting_problem(size=512, batch=32, delay_s=0.03),
        )
        _kill_mid_run(client, counting, at_step=10)
        counting.wait(timeout=600)
        counts = counting.model().counts.detach()
        exact = bool((counts == 3).all())
        print(
            f"5. exactly-once check with a kill: every one of {len(counts)} samples trained "
            f"on exactly 3 times in 3 epochs: {'yes' if exact else 'NO'} "
            f"(min {int(counts.min())}, max {int(counts.max())})"
        )
        if not exact:
            raise SystemExit("a sample was lost or used twice")
    finally:
        client.close()
        if started_here:
            ft.down()
            print("6. stopped the cluster this demo started")


def _why_no_rejoin(client: Any, victim: str, killed_at: float, info: dict[str, Any]) -> str:
    """Said plainly: the killed worker did not train in the run again, and why."""
    ended = (info.get("finished_at") or time.time()) - killed_at
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # is its restarted process back in the cluster?
        names = {str(w["name"]) for w in client.scheduler_info(n_workers=-1)["workers"].values()}
        if victim in names:
            back = time.time() - killed_at
            return (
                f"worker {victim} did not rejoin the run: the run ended {ended:.1f} s after "
                f"the kill, and the restarted worker was in the cluster {back:.1f} s after it "
                f"(at the latest) - too late for a run this short to admit it"
            )
        time.sleep(0.1)  # polling the cluster for a process its nanny starts
    return (
        f"worker {victim} did not rejoin the run, and is not back in the cluster 60 s "
        f"after the run ended: its nanny did not restart it (see the cluster's log)"
    )


def _runs_of(values: list[int]) -> str:
    out: list[str] = []
    for v in values:
        if not out or out[-1].split("x")[0] != str(v):
            out.append(f"{v}x1")
        else:
            n = int(out[-1].split("x")[1]) + 1
            out[-1] = f"{v}x{n}"
    return " -> ".join(o.split("x")[0] for o in out)


if __name__ == "__main__":
    main()
