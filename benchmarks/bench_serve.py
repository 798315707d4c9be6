"""Serving: ft.serve against Ray Serve and a bare Dask actor, same model, same loop.

Three replicas of ``small_mlp`` (32-64-4) on a LocalCluster of 3 worker processes
(``ft_notebook.testing.training_cluster``, as a user starts one), a closed loop of
``--requests`` requests (batches of 4) from ``--callers`` threads. Per fault, ``--runs``
runs for ft, each fault injected after a third of the requests were answered:

- **kill**: one replica's worker SIGKILLed. Failed requests; the latest answer of the
  requests in flight at the kill, after it; p99 of the loop against the no-fault p99;
  the restarted worker's registration -> its replica back in the caller's rotation.
- **hang**: one replica's worker SIGSTOPped (the control plane kills it after
  ``hung-after``; its nanny restarts it). Failed requests; the longest request
  against the deadline; the stop -> the replica out of rotation.
- **hedge**: one replica 200 ms slower on 5% of its calls; the p99 with hedging
  against without, and against the healthy p99; extra requests sent.
- **all**: every worker SIGKILLed. Failed requests; the fallback's answers' latency
  against the fallback's own time; the last worker's registration -> HEALTHY.
- **overhead**: no fault: p50 and requests/s against calling a Dask actor holding the
  same model directly, and against Ray Serve's handle (``benchmarks/.venv-ray``, made
  on first use, Ray Serve with its defaults and with fast health checks; kill and hang
  there too, ``--ray-runs`` each).

    .venv/bin/python benchmarks/bench_serve.py [--runs 20] [--ray-runs 5] [--only kill,hang]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from _peers import peer_python

import ft_notebook as ft
from ft_notebook.cluster.chaos import hang_worker, kill_worker, resume_worker
from ft_notebook.events import Health, cluster_topic, history
from ft_notebook.serve._chaos import slow_replica
from ft_notebook.testing import PollTimeout, poll_for, training_cluster
from ft_notebook.testing.serving import closed_loop, inputs, popularity, small_mlp

HERE = Path(__file__).resolve().parent
RAY_VENV = HERE / ".venv-ray"
RAY = "ray[serve]==2.60.0"


def q(values: list[float], quantile: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


def loop_stats(result: Any) -> dict[str, float]:
    seconds = [o.seconds for o in result.answers]
    span = max(o.started + o.seconds for o in result.outcomes) - min(
        o.started for o in result.outcomes
    )
    return {
        "p50_ms": q(seconds, 0.5) * 1e3,
        "p99_ms": q(seconds, 0.99) * 1e3,
        "rps": len(seconds) / span,
        "failed": len(result.errors),
    }


def whole(svc: ft.Service, client: Any) -> None:
    poll_for(
        lambda: (
            len(client.scheduler_info(n_workers=-1)["workers"]) == 3
            and svc.router.tier is Health.HEALTHY
            and len(svc.router.views) == 3
        ),
        timeout=120,
        what="3 workers and 3 replicas in rotation",
    )


def victim_of(svc: ft.Service, index: int) -> str:
    return next(r["worker"] for r in svc.table()["replicas"] if r["index"] == index)


def joined_after(worker: str, t: float) -> float | None:
    times = [
        e.time
        for e in history(cluster_topic())
        if e.kind == "worker-joined" and e.data.get("name") == worker and e.time > t
    ]
    return min(times) if times else None


def back_in_rotation(svc: ft.Service, replicas: int = 3) -> float:
    """Wall time at which the caller's router has ``replicas`` replicas in rotation."""
    poll_for(
        lambda: (
            sum(1 for v in list(svc.router.views.values()) if v.breaker.in_rotation()) >= replicas
        ),
        timeout=120,
        interval=0.002,
        max_interval=0.005,
        what="replicas back in rotation",
    )
    return time.time()


def kill_run(svc: ft.Service, client: Any, xs: list[Any], callers: int) -> dict[str, Any]:
    whole(svc, client)
    victim, mark = victim_of(svc, 1), {}

    def inject() -> None:
        mark["wall"], mark["perf"] = time.time(), time.perf_counter()
        kill_worker(client, victim)

    result = closed_loop(svc.call, xs, callers=callers, after={len(xs) // 3: inject})
    back = back_in_rotation(svc)
    joined = joined_after(victim, mark["wall"])
    in_flight = [o for o in result.outcomes if o.started < mark["perf"] < o.started + o.seconds]
    return {
        **loop_stats(result),
        "in_flight_done_ms": max((o.started + o.seconds - mark["perf"]) * 1e3 for o in in_flight)
        if in_flight
        else 0.0,
        "rejoin_s": None if joined is None else back - joined,
    }


def hang_run(svc: ft.Service, client: Any, xs: list[Any], callers: int) -> dict[str, Any]:
    whole(svc, client)
    victim, mark = victim_of(svc, 1), {}
    deadline = 5.0

    def inject() -> None:
        mark["wall"] = time.time()
        hang_worker(client, victim)

    try:
        result = closed_loop(
            lambda x: svc.call(x, deadline_s=deadline),
            xs,
            callers=callers,
            after={len(xs) // 3: inject},
        )
        # requests route around a stalled replica, so the loop may end before the
        # health check takes it out: keep it stopped until then (or 10 s)
        with contextlib.suppress(PollTimeout):
            poll_for(lambda: ejected_at(svc, mark["wall"]) is not None, timeout=10)
    finally:
        resume_worker(client, victim)
    out = ejected_at(svc, mark["wall"])
    return {
        **loop_stats(result),
        "max_ms": max(o.seconds for o in result.outcomes) * 1e3,
        "deadline_ms": deadline * 1e3,
        "ejected_s": None if out is None else out - mark["wall"],
    }


def ejected_at(svc: ft.Service, since: float) -> float | None:
    """When the router first left HEALTHY after ``since`` (wall time)."""
    out = [t["time"] for t in svc.router.transitions if t["time"] >= since]
    return min(out) if out else None


def hedge_runs(svc: ft.Service, client: Any, xs: list[Any], callers: int, runs: int) -> Any:
    whole(svc, client)
    slow_replica(client, "replica:bench/0", ms=200, fraction=0.05)
    rows = []
    try:
        for _ in range(runs):
            before = dict(svc.router.counts)
            hedged = closed_loop(svc.call, xs, callers=callers)
            sent = svc.router.counts
            extra = (sent["hedges"] - before["hedges"]) / (sent["requests"] - before["requests"])
            plain = closed_loop(lambda x: svc.call(x, hedge=False), xs, callers=callers)
            rows.append(
                {
                    "hedged_p99_ms": loop_stats(hedged)["p99_ms"],
                    "unhedged_p99_ms": loop_stats(plain)["p99_ms"],
                    "extra": extra,
                    "failed": len(hedged.errors) + len(plain.errors),
                }
            )
    finally:
        slow_replica(client, "replica:bench/0", ms=0)
    return rows


def all_down_run(svc: ft.Service, client: Any, xs: list[Any], callers: int) -> dict[str, Any]:
    whole(svc, client)
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    names = sorted(str(w["name"]) for w in workers)  # LocalCluster names them 0, 1, 2
    mark = {}

    def inject() -> None:
        mark["wall"] = time.time()
        for name in names:
            kill_worker(client, name)
        mark["killed"] = time.perf_counter()  # the kills go out one by one: ~30 ms

    result = closed_loop(svc.call, xs, callers=callers, after={len(xs) // 3: inject})
    healthy = back_in_rotation(svc)
    joins = [joined_after(n, mark["wall"]) for n in names]
    fallback = [o.seconds for o in result.answers if o.answer.tier is Health.FALLBACK]
    # asked once every worker was gone, not caught by the kills on a live replica
    after = [
        o.seconds
        for o in result.answers
        if o.answer.tier is Health.FALLBACK and o.started > mark["killed"]
    ]
    return {
        "failed": len(result.errors),
        "fallback_answers": len(fallback),
        "fallback_p50_ms": q(fallback, 0.5) * 1e3 if fallback else None,
        "fallback_max_ms": max(fallback) * 1e3 if fallback else None,
        "after_kills_max_ms": max(after) * 1e3 if after else None,
        "healthy_after_last_join_s": healthy - max(joins) if all(joins) else None,
    }


class ActorModel:
    """A bare Dask actor holding the same model: the floor for overhead."""

    def __init__(self) -> None:
        self.model = small_mlp().eval()

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return self.model(x)


def actor_loop(client: Any, xs: list[Any], callers: int, runs: int) -> list[dict[str, float]]:
    with client.as_current():  # an actor's handle calls through the current client
        actor = client.submit(ActorModel, actor=True).result()
        for x in xs[:50]:
            actor.predict(x).result()
        return [
            loop_stats(closed_loop(lambda x: actor.predict(x).result(), xs, callers=callers))
            for _ in range(runs)
        ]


def ray_python() -> str:
    return peer_python(RAY_VENV, RAY, "ray.serve")


def ray_arm(settings: str, runs: int, requests: int, callers: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent), RAY_DEDUP_LOGS="0")
    done = subprocess.run(
        [
            ray_python(),
            str(HERE / "_ray_serve_arm.py"),
            "--settings",
            settings,
            "--runs",
            str(runs),
            "--requests",
            str(requests),
            "--callers",
            str(callers),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )
    if done.returncode:
        raise SystemExit(f"the Ray Serve arm failed:\n{done.stderr[-3000:]}")
    mark = "ft-bench-result: "
    found = [line for line in done.stdout.splitlines() if line.startswith(mark)]
    if not found:
        raise SystemExit(f"the Ray Serve arm printed no result:\n{done.stdout[-3000:]}")
    return json.loads(found[-1][len(mark) :])


def med(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def span(rows: list[dict[str, Any]], key: str) -> str:
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return "n/a"
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--ray-runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--only", default="overhead,kill,hang,hedge,all,ray")
    args = parser.parse_args()
    only = set(args.only.split(","))
    xs = inputs(args.requests)
    out: dict[str, Any] = {}
    with training_cluster(3) as client:
        svc = ft.serve(
            small_mlp,
            3,
            fallback=popularity,
            name="bench",
            cluster=client,
            example=torch.zeros(1, 32),
        )
        for x in xs[:100]:
            svc.call(x)
        out["baseline"] = [
            loop_stats(closed_loop(svc.call, xs, callers=args.callers)) for _ in range(5)
        ]
        if "overhead" in only:
            out["actor"] = actor_loop(client, xs, args.callers, 5)
        faults = {"kill": kill_run, "hang": hang_run, "all": all_down_run}
        for name, run in faults.items():
            if name in only:
                out[name] = [run(svc, client, xs, args.callers) for _ in range(args.runs)]
                print(name, json.dumps(out[name][-1]), file=sys.stderr, flush=True)
        if "hedge" in only:
            out["hedge"] = hedge_runs(svc, client, xs, args.callers, max(3, args.runs // 4))
        svc.close()
    save(out)  # before the Ray arms: their failure must not cost these
    if "ray" in only:
        for settings in ("default", "fast"):
            out[f"ray-{settings}"] = ray_arm(settings, args.ray_runs, args.requests, args.callers)
    report(out, args)


def report(out: dict[str, Any], args: Any) -> None:
    base = out["baseline"]
    p99 = med(base, "p99_ms") or 0.0
    print(f"{args.requests} requests from {args.callers} callers per loop; medians (min-max)\n")
    print("| scenario | tool | runs | failed requests | measure | value |")
    print("|---|---|---:|---:|---|---|")
    print(
        f"| no fault | ft | {len(base)} | {sum(r['failed'] for r in base)} | "
        f"p50 ms / p99 ms / req/s | {span(base, 'p50_ms')} / {span(base, 'p99_ms')} / "
        f"{span(base, 'rps')} |"
    )
    if "actor" in out:
        a = out["actor"]
        print(
            f"| no fault | Dask actor | {len(a)} | {sum(r['failed'] for r in a)} | "
            f"p50 ms / p99 ms / req/s | {span(a, 'p50_ms')} / {span(a, 'p99_ms')} / "
            f"{span(a, 'rps')} |"
        )
    for settings in ("default", "fast"):
        ray = out.get(f"ray-{settings}")
        if ray:
            b = ray["baseline"]
            print(
                f"| no fault | Ray Serve {ray['ray']} ({settings}) | {len(b)} | "
                f"{sum(r['failed'] for r in b)} | p50 ms / p99 ms / req/s | "
                f"{span(b, 'p50_ms')} / {span(b, 'p99_ms')} / {span(b, 'rps')} |"
            )
    if "kill" in out:
        k = out["kill"]
        print(
            f"| kill 1 replica | ft | {len(k)} | {sum(r['failed'] for r in k)} "
            f"({sum(1 for r in k if r['failed'] == 0)}/{len(k)} runs with 0) | in flight done "
            f"after kill, ms | {span(k, 'in_flight_done_ms')} |"
        )
        ratio = [{"r": r["p99_ms"] / p99} for r in k]
        print(f"| | | | | p99 / no-fault p99 | {span(ratio, 'r')} |")
        print(f"| | | | | worker registered -> replica in rotation, s | {span(k, 'rejoin_s')} |")
    if "hang" in out:
        h = out["hang"]
        print(
            f"| hang 1 replica | ft | {len(h)} | {sum(r['failed'] for r in h)} | "
            f"longest request ms (deadline {h[0]['deadline_ms']:.0f}) | {span(h, 'max_ms')} |"
        )
        print(f"| | | | | stop -> out of rotation, s | {span(h, 'ejected_s')} |")
    for settings in ("default", "fast"):
        ray = out.get(f"ray-{settings}")
        if ray:
            for fault, label in (("kill", "kill 1 replica"), ("hang", "hang 1 replica")):
                rows = ray["runs"][fault]
                print(
                    f"| {label} | Ray Serve ({settings}) | {len(rows)} | "
                    f"{sum(r['failed'] for r in rows)} | p99 ms / fault -> 3 running, s | "
                    f"{span(rows, 'p99_ms')} / {span(rows, 'back_to_3_s')} |"
                )
    if "hedge" in out:
        g = out["hedge"]
        ratio = [{"r": r["hedged_p99_ms"] / r["unhedged_p99_ms"]} for r in g]
        print(
            f"| 1 replica +200 ms on 5% | ft | {len(g)} | {sum(r['failed'] for r in g)} | "
            f"p99 hedged / unhedged ms | {span(g, 'hedged_p99_ms')} / "
            f"{span(g, 'unhedged_p99_ms')} (ratio {span(ratio, 'r')}) |"
        )
        print(f"| | | | | extra requests | {span(g, 'extra')} (healthy p99 {p99:.3g} ms) |")
    if "all" in out:
        d = out["all"]
        own = fallback_own_ms()
        print(
            f"| all replicas killed | ft | {len(d)} | {sum(r['failed'] for r in d)} | "
            f"fallback answers p50 / max ms (its own time {own:.3g} ms) | "
            f"{span(d, 'fallback_p50_ms')} / {span(d, 'fallback_max_ms')} |"
        )
        print(
            f"| | | | | asked after the last kill: longest fallback answer, ms | "
            f"{span(d, 'after_kills_max_ms')} |"
        )
        print(
            f"| | | | | last worker registered -> HEALTHY, s | "
            f"{span(d, 'healthy_after_last_join_s')} |"
        )
    path = save(out)
    print(f"\nraw samples: {path.relative_to(HERE.parent)}")


def save(out: dict[str, Any]) -> Path:
    path = HERE / "results" / "serve.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"command": " ".join(sys.argv), "time": time.time(), **out}))
    return path


def fallback_own_ms() -> float:
    x = torch.zeros(4, 32)
    t = time.perf_counter()
    for _ in range(1000):
        popularity(x)
    return time.perf_counter() - t  # ms per call: seconds for 1000 calls


if __name__ == "__main__":
    main()
