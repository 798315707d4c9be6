"""Serving: ft.serve against Ray Serve and a bare Dask actor, same model, same loop.

Three replicas of ``small_mlp`` (32-64-4) on a LocalCluster of 3 worker processes
(``ft_notebook.testing.training_cluster``, as a user starts one), a closed loop of
``--requests`` requests (batches of 4) from ``--callers`` threads. Per fault, ``--runs``
runs for ft, each fault injected after a third of the requests were answered:

- **kill**: one replica's worker SIGKILLed. Failed requests; the latest answer of the
  requests in flight at the kill, after it; p99 of the loop against the no-fault p99;
  the restarted worker's registration -> its replica back in the caller's rotation;
  the kill -> 3 replicas in rotation (against Ray Serve's 3 running).
- **hang**: one replica's worker SIGSTOPped (the control plane kills it after
  ``hung-after``; its nanny restarts it). Failed requests; the longest request
  against the deadline; the stop -> the replica out of rotation.
- **hedge**: one replica 200 ms slower on 5% of its calls; the p99 with hedging
  against a service with hedging off (``hedge_budget=0``), and against the healthy
  p99; extra requests sent; ``hedge=False`` per call as context.
- **all**: every worker SIGKILLed. Failed requests; the slowest fallback answer of the
  requests asked after the last kill, against the fallback's own time; those in flight
  at the kills timed from the last kill; the last worker's registration -> HEALTHY.
- **poison**: a second service of ``poisoned_mlp`` (small_mlp, except that an input
  starting with ``POISON`` kills the worker computing it), the same loop from one
  caller fewer, and a poison request sent after a third of the answers: alternately a crashing one
  and an oversized one (4,000,000 x 64 float32, 1 GB). Replicas lost to it (worker
  processes that died), how it ended, and the other callers' p99 and failures.
- **overhead**: no fault: p50, p99 and requests/s against calling a Dask actor holding
  the same model directly.
- **ray**: the no-fault loop against Ray Serve's handle (``benchmarks/.venv-ray``, made
  on first use, Ray Serve with its defaults and with fast health checks), and, with
  kill or hang in the same run, those faults there too, ``--ray-runs`` each.

Each table's raw samples (one per loop or run) go to ``benchmarks/results/serve.json``
(``_report.py``); a partial run (``--only``) refreshes only its own tables.

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
from _report import Goal, Table, save

import ft_notebook as ft
from ft_notebook.cluster.chaos import hang_worker, kill_worker, resume_worker
from ft_notebook.events import Health, cluster_topic, history
from ft_notebook.serve._chaos import slow_replica
from ft_notebook.testing import PollTimeout, poll_for, training_cluster
from ft_notebook.testing.serving import (
    POISON,
    closed_loop,
    inputs,
    poisoned_mlp,
    popularity,
    small_mlp,
)

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
    # its reference: the same loop with no fault, just before, on the same service at
    # the same moment of a shared machine (5 no-fault loops at the start varied 9-16 ms
    # in p99 from one run of the script to the next, the kill loops' 18-21 ms)
    nofault = loop_stats(closed_loop(svc.call, xs, callers=callers))
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
        "back_s": back - mark["wall"],  # the kill -> 3 in rotation: Ray's "3 running"
        "nofault_p99_ms": nofault["p99_ms"],
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
        mark["waited"] = time.time()
    finally:
        resume_worker(client, victim)
    out = ejected_at(svc, mark["wall"])
    return {
        **loop_stats(result),
        "max_ms": max(o.seconds for o in result.outcomes) * 1e3,
        "deadline_ms": deadline * 1e3,
        "ejected_s": None if out is None else out - mark["wall"],
        "waited_s": mark["waited"] - mark["wall"],  # still in rotation this long: a bound
    }


def ejected_at(svc: ft.Service, since: float) -> float | None:
    """When the router first left HEALTHY after ``since`` (wall time)."""
    out = [t["time"] for t in svc.router.transitions if t["time"] >= since]
    return min(out) if out else None


def hedge_runs(svc: ft.Service, client: Any, xs: list[Any], callers: int, runs: int) -> Any:
    """Per run: a loop with hedging (the defaults), one with ``hedge=False`` per call
    (routing around a stalled replica stays on), and one on a service built with
    hedging off (``hedge_budget=0``: plain least outstanding, the reference)."""
    plain_svc = ft.serve(
        small_mlp,
        3,
        fallback=popularity,
        name="bench-plain",
        cluster=client,
        example=torch.zeros(1, 32),
        hedge_budget=0,
    )
    whole(svc, client)
    whole(plain_svc, client)
    for x in xs[:100]:
        plain_svc.call(x)
    slowed = ("replica:bench/0", "replica:bench-plain/0")
    for target in slowed:
        slow_replica(client, target, ms=200, fraction=0.05)
    rows = []
    try:
        for _ in range(runs):
            before = dict(svc.router.counts)
            hedged = closed_loop(svc.call, xs, callers=callers)
            sent = svc.router.counts
            extra = (sent["hedges"] - before["hedges"]) / (sent["requests"] - before["requests"])
            per_call = closed_loop(lambda x: svc.call(x, hedge=False), xs, callers=callers)
            plain = closed_loop(plain_svc.call, xs, callers=callers)
            rows.append(
                {
                    "hedged_p99_ms": loop_stats(hedged)["p99_ms"],
                    "per_call_off_p99_ms": loop_stats(per_call)["p99_ms"],
                    "unhedged_p99_ms": loop_stats(plain)["p99_ms"],
                    "extra": extra,
                    "failed": len(hedged.errors) + len(per_call.errors) + len(plain.errors),
                }
            )
            print("hedge", json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        for target in slowed:
            slow_replica(client, target, ms=0)
        plain_svc.close()
    return rows


def all_down_run(svc: ft.Service, client: Any, xs: list[Any], callers: int) -> dict[str, Any]:
    whole(svc, client)
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    names = sorted(str(w["name"]) for w in workers)  # LocalCluster names them 0, 1, 2
    mark = {}

    def inject() -> None:
        mark["wall"], mark["perf"] = time.time(), time.perf_counter()
        for name in names:
            kill_worker(client, name)
        mark["killed"] = time.perf_counter()  # the kills go out one by one: ~30 ms

    result = closed_loop(svc.call, xs, callers=callers, after={len(xs) // 3: inject})
    first = first_replica_answer(svc, result, xs[0], mark)
    healthy = back_in_rotation(svc)
    joins = [joined_after(n, mark["wall"]) for n in names]
    fallback = [o.seconds for o in result.answers if o.answer.tier is Health.FALLBACK]
    # asked once every worker was gone, not caught by the kills on a live replica
    after = [
        o.seconds
        for o in result.answers
        if o.answer.tier is Health.FALLBACK and o.started > mark["killed"]
    ]
    # in flight on a replica when the kills came: from the last kill to their answer
    caught = [
        o.started + o.seconds - mark["killed"]
        for o in result.answers
        if o.answer.tier is Health.FALLBACK and o.started <= mark["killed"]
    ]
    return {
        "failed": len(result.errors),
        "fallback_answers": len(fallback),
        "caught_after_kills_max_ms": max(caught) * 1e3 if caught else None,
        "fallback_p50_ms": q(fallback, 0.5) * 1e3 if fallback else None,
        "fallback_max_ms": max(fallback) * 1e3 if fallback else None,
        "after_kills_max_ms": max(after) * 1e3 if after else None,
        "healthy_after_last_join_s": healthy - max(joins) if all(joins) else None,
        "first_replica_answer_s": first,
    }


def first_replica_answer(svc: ft.Service, result: Any, x: Any, mark: dict[str, float]) -> float:
    """From the first kill to the first answer a replica (not the fallback) gave to a
    request asked after the last kill: in the loop, or, when the loop ended first,
    to a caller asking again and again."""
    in_loop = [
        o.started + o.seconds
        for o in result.answers
        if o.answer.tier is not Health.FALLBACK and o.started > mark["killed"]
    ]
    if in_loop:
        return min(in_loop) - mark["perf"]
    poll_for(
        lambda: svc.call(x).tier is not Health.FALLBACK,
        timeout=120,
        interval=0.002,
        max_interval=0.005,
        what="an answer from a replica",
    )
    return time.perf_counter() - mark["perf"]


def worker_pids(client: Any) -> dict[str, int]:
    """Worker name -> its process id."""
    names = {a: str(w["name"]) for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
    return {names[a]: pid for a, pid in client.run(os.getpid).items() if a in names}


def poison_runs(client: Any, xs: list[Any], callers: int, tries: int) -> list[dict[str, Any]]:
    svc = ft.serve(
        poisoned_mlp,
        3,
        fallback=popularity,
        name="bench-poison",
        cluster=client,
        example=torch.zeros(1, 32),
    )
    for x in xs[:100]:
        svc.call(x)
    rows = []
    for i in range(tries):
        whole(svc, client)
        kind = "crash" if i % 2 == 0 else "oversized"
        before, mark = worker_pids(client), {}
        if kind == "crash":
            bad = torch.zeros(2, 32)
            bad[0, 0] = POISON
        else:
            bad = torch.zeros(4_000_000, 64)

        def inject(bad: Any = bad, mark: dict[str, Any] = mark) -> None:
            started = time.perf_counter()
            try:
                svc.call(bad)
                mark["outcome"] = "answered"
            except Exception as e:
                mark["outcome"] = type(e).__name__
            mark["seconds"] = time.perf_counter() - started

        result = closed_loop(svc.call, xs, callers=callers - 1, after={len(xs) // 3: inject})
        poll_for(lambda m=mark: "outcome" in m, timeout=60, what="the poison request's end")
        whole(svc, client)  # the killed workers back, every replica in rotation
        after = worker_pids(client)
        lost = sum(1 for name, pid in before.items() if after.get(name) != pid)
        rows.append(
            {
                **loop_stats(result),
                "kind": kind,
                "replicas_lost": lost,
                "outcome": mark["outcome"],
                "poison_s": mark["seconds"],
                "errors": sorted(
                    {f"{type(o.error).__name__}: {o.error}"[:160] for o in result.errors}
                ),
            }
        )
        print("poison", json.dumps(rows[-1]), file=sys.stderr, flush=True)
    svc.close()
    return rows


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


def values(rows: list[dict[str, Any]], key: str, scale: float = 1.0) -> list[float]:
    """One sample per run; a run that has none (None) is left out."""
    return [r[key] * scale for r in rows if r.get(key) is not None]


def missing(rows: list[dict[str, Any]], key: str, what: str) -> str:
    gone = sum(1 for r in rows if r.get(key) is None)
    return f"{what} in {gone} of {len(rows)} runs" if gone else ""


def add(table: Table, measure: str, unit: str, ours: list[float], **kw: Any) -> None:
    """A row, unless a side has no sample at all (said on stderr)."""
    if not ours or kw.get("reference") == []:
        print(f"{table.id}: no samples for {measure!r}, row left out", file=sys.stderr)
        return
    table.row(measure, unit, ours, **kw)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--ray-runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--only", default="overhead,kill,hang,hedge,all,poison,ray")
    parser.add_argument("--poison-tries", type=int, default=20)
    parser.add_argument(
        "--sandbox",
        choices=("on", "off"),
        default="on",
        help="re-sent requests and hedges in a fork of their replica (the default); "
        "off: a comparison arm, its figures only in --raw",
    )
    parser.add_argument("--raw", default="", help="write the loops' figures here (JSON)")
    parser.add_argument(
        "--worker-start",
        choices=("forkserver", "spawn"),
        default="forkserver",
        help="how nannies start workers (forkserver: as ft.cluster() does)",
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    xs = inputs(args.requests)
    out: dict[str, Any] = {}
    with training_cluster(3, worker_start=args.worker_start) as client:
        svc = ft.serve(
            small_mlp,
            3,
            fallback=popularity,
            name="bench",
            cluster=client,
            example=torch.zeros(1, 32),
            sandbox=args.sandbox == "on",
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
        if "poison" in only:
            out["poison"] = poison_runs(client, xs, args.callers, args.poison_tries)
    if args.raw:  # the loops' own figures, e.g. of an arm compared outside the tables
        Path(args.raw).write_text(json.dumps(out, default=str))
    if args.sandbox == "off":  # a comparison arm: the tables are the default's
        return
    # saved before the Ray arms: their failure must not cost these
    save("serve", TITLE, ft_tables(out, args))
    if "ray" in only:
        for settings in ("default", "fast"):
            out[f"ray-{settings}"] = ray_arm(settings, args.ray_runs, args.requests, args.callers)
        save("serve", TITLE, ray_tables(out, args))


TITLE = "Serving: ft.serve against Ray Serve and a bare Dask actor"


def loop_setup(args: Any) -> str:
    return (
        f"Three replicas of a 32-64-4 MLP on a LocalCluster of 3 worker processes; "
        f"{args.requests} requests (batches of 4) per loop from {args.callers} closed-loop "
        f"callers"
    )


def ft_tables(out: dict[str, Any], args: Any) -> list[Table]:
    base = out["baseline"]
    tables = []
    if "actor" in out:
        a = out["actor"]
        t = Table(
            "overhead",
            "No fault: ft.serve against a bare Dask actor",
            f"{loop_setup(args)}, against the callers calling a Dask actor that holds the "
            f"same model; {len(base)} loops of ft, then {len(a)} of the actor, one sample "
            f"per loop.",
        )
        ref = {"reference_name": "Dask actor"}
        add(
            t,
            "p50 latency",
            "s",
            values(base, "p50_ms", 1e-3),
            **ref,
            reference=values(a, "p50_ms", 1e-3),
        )
        add(
            t,
            "p99 latency",
            "s",
            values(base, "p99_ms", 1e-3),
            **ref,
            reference=values(a, "p99_ms", 1e-3),
        )
        add(t, "throughput", "req/s", values(base, "rps"), **ref, reference=values(a, "rps"))
        add(
            t,
            "failed requests",
            "count",
            values(base, "failed"),
            goal=Goal("value", "==", 0, stat="all"),
        )
        tables.append(t)
    zero = Goal("value", "==", 0, stat="all")
    at_third = f"after {args.requests // 3} answers"
    if "kill" in out:
        k = out["kill"]
        t = Table(
            "kill",
            "One replica's worker killed",
            f"{loop_setup(args)}; one replica's worker SIGKILLed {at_third}, its nanny "
            f"restarts it; {len(k)} runs, one sample per run (the no-fault p99: the same "
            f"loop with no fault just before each kill).",
        )
        add(t, "failed requests", "count", values(k, "failed"), goal=zero)
        add(
            t,
            "in flight at the kill: the last answered after it",
            "s",
            values(k, "in_flight_done_ms", 1e-3),
            goal=Goal("value", "<=", 0.150),
        )
        add(
            t,
            "p99 latency of the loop",
            "s",
            values(k, "p99_ms", 1e-3),
            reference=values(k, "nofault_p99_ms", 1e-3),
            reference_name="no-fault p99 (the loop before each kill)",
            ratio="pairs",
            goal=Goal("ratio", "<=", 2.0),
        )
        add(
            t,
            "kill -> 3 replicas in rotation again",
            "s",
            values(k, "back_s"),
            goal=Goal("value", "<=", 1.0),
            detail=f"workers started by {args.worker_start}",
        )
        add(
            t,
            "restarted worker registered -> its replica in rotation",
            "s",
            values(k, "rejoin_s"),
            goal=Goal("value", "<=", 2.0),
            detail=missing(k, "rejoin_s", "no registration seen"),
        )
        tables.append(t)
    if "hang" in out:
        h = out["hang"]
        deadline = h[0]["deadline_ms"] / 1e3
        t = Table(
            "hang",
            "One replica's worker hung",
            f"{loop_setup(args)}, each with a {deadline:g} s deadline; one replica's worker "
            f"SIGSTOPped {at_third} (the control plane kills it after `hung-after`, its "
            f"nanny restarts it); {len(h)} runs, one sample per run.",
        )
        add(t, "failed requests", "count", values(h, "failed"), goal=zero)
        add(
            t,
            "longest request",
            "s",
            values(h, "max_ms", 1e-3),
            goal=Goal("value", "<=", deadline, stat="all"),
        )
        # a run whose replica was still in rotation when the wait ended counts the wait
        ejected = [r["ejected_s"] if r["ejected_s"] is not None else r["waited_s"] for r in h]
        add(
            t,
            "stop -> replica out of rotation",
            "s",
            ejected,
            goal=Goal("value", "<=", 1.0),
            detail=missing(
                h, "ejected_s", "still in rotation when the wait ended (the wait counted)"
            ),
        )
        tables.append(t)
    if "hedge" in out:
        g = out["hedge"]
        healthy = statistics.median(values(base, "p99_ms", 1e-3))
        t = Table(
            "hedge",
            "One replica slow on 5% of its calls: hedging",
            f"{loop_setup(args)}; one replica 200 ms slower on 5% of its calls; {len(g)} runs, "
            f"each three loops: the service with hedging (the defaults), the same with "
            f"`hedge=False` per call, and a second service built with `hedge_budget=0` "
            f"(hedging off: plain least outstanding, whose one replica is slowed the same "
            f"way); the healthy p99 is the median of {len(base)} no-fault loops of the same "
            f"run.",
        )
        add(
            t,
            "p99 latency, hedged",
            "s",
            values(g, "hedged_p99_ms", 1e-3),
            reference=values(g, "unhedged_p99_ms", 1e-3),
            reference_name="hedging off (`hedge_budget=0`)",
            ratio="pairs",
            goal=Goal("ratio", "<=", 0.3),
        )
        add(
            t,
            "p99 latency, `hedge=False` per call (still routed around a stalled replica)",
            "s",
            values(g, "per_call_off_p99_ms", 1e-3),
            reference=values(g, "unhedged_p99_ms", 1e-3),
            reference_name="hedging off (`hedge_budget=0`)",
            ratio="pairs",
        )
        add(
            t,
            "hedged p99 above the healthy p99",
            "s",
            [v - healthy for v in values(g, "hedged_p99_ms", 1e-3)],
            goal=Goal("value", "<=", 0.030),
        )
        add(
            t,
            "extra requests sent (hedges)",
            "%",
            values(g, "extra", 100.0),
            goal=Goal("value", "<=", 5.0),
        )
        add(t, "failed requests, all three loops", "count", values(g, "failed"), goal=zero)
        tables.append(t)
    if "all" in out:
        d = out["all"]
        own = fallback_own_s()
        limit = own + 0.020
        t = Table(
            "all",
            "Every replica's worker killed: the fallback answers",
            f"{loop_setup(args)}; all 3 workers SIGKILLed {at_third} (one by one), the "
            f"fallback (`popularity`) answers until a replica is back; {len(d)} runs, one "
            f"sample per run; the fallback's own time is the mean of 1000 calls.",
        )
        add(t, "failed requests", "count", values(d, "failed"), goal=zero)
        add(
            t,
            "fallback answer, median of a run",
            "s",
            values(d, "fallback_p50_ms", 1e-3),
            reference=[own],
            reference_name="the fallback's own call",
        )
        from_start = values(d, "fallback_max_ms")
        add(
            t,
            "in flight at the kills: the last kill -> their fallback answer, slowest",
            "s",
            values(d, "caught_after_kills_max_ms", 1e-3),
            goal=Goal("value", "<=", 0.150),
            detail=(
                "goal: the in-flight goal of a kill, 150 ms; from their start, the "
                f"slowest was {statistics.median(from_start):.1f} ms (median of runs)"
                if from_start
                else "goal: the in-flight goal of a kill, 150 ms"
            ),
        )
        add(
            t,
            "asked after the last kill: slowest fallback answer",
            "s",
            values(d, "after_kills_max_ms", 1e-3),
            goal=Goal("value", "<=", limit),
            detail="goal: the fallback's own time + 20 ms",
        )
        add(
            t,
            "first kill -> first answer from a replica",
            "s",
            values(d, "first_replica_answer_s"),
            goal=Goal("value", "<=", 1.5),
            detail=f"workers started by {args.worker_start}",
        )
        add(
            t,
            "last worker registered -> HEALTHY",
            "s",
            values(d, "healthy_after_last_join_s"),
            goal=Goal("value", "<=", 2.0),
            detail=missing(d, "healthy_after_last_join_s", "a registration not seen"),
        )
        tables.append(t)
    if "poison" in out:
        p = out["poison"]
        crash = [r for r in p if r["kind"] == "crash"]
        big = [r for r in p if r["kind"] == "oversized"]
        t = Table(
            "poison",
            "Poison requests: an input that crashes its replica, and one too large",
            f"{loop_setup(args)}, one caller fewer, on a service of the same MLP that kills "
            f"the worker computing an input starting with POISON; one poison request "
            f"{at_third}, alternately crashing and oversized (4,000,000 x 64 float32, "
            f"1 GB; max_request_bytes 'auto'); {len(p)} tries, the killed workers restarted "
            f"between them. The no-fault p99: the other service's {len(base)} loops.",
        )
        add(
            t,
            "replicas lost to a crashing request",
            "count",
            values(crash, "replicas_lost"),
            goal=Goal("value", "<=", 1, stat="all"),
            detail="worker processes that died: the first replica's; re-sent once, it ran "
            "in a fork of another replica's process, and killed only the fork",
        )
        add(
            t,
            "crashing requests ended as PoisonRequest",
            "bool",
            [float(r["outcome"] == "PoisonRequest") for r in crash],
            goal=Goal("value", "==", 1, stat="all"),
        )
        add(
            t,
            "replicas lost to an oversized request",
            "count",
            values(big, "replicas_lost"),
            goal=zero,
            detail="refused before it is sent (RequestTooLarge)",
        )
        add(
            t,
            "other callers' p99 during a poison try",
            "s",
            values(p, "p99_ms", 1e-3),
            reference=values(base, "p99_ms", 1e-3),
            reference_name="no fault",
            goal=Goal("ratio", "<=", 2.0),
        )
        add(t, "other callers' failed requests", "count", values(p, "failed"), goal=zero)
        tables.append(t)
    return tables


def ray_tables(out: dict[str, Any], args: Any) -> list[Table]:
    base = out["baseline"]
    arms = {s: out[f"ray-{s}"] for s in ("default", "fast")}
    version = arms["default"]["ray"]
    checks = "its default health checks (every 10 s, 30 s timeout) and fast ones (0.1 s, 0.5 s)"
    t = Table(
        "ray",
        "No fault: ft.serve against Ray Serve",
        f"{loop_setup(args)}; Ray Serve {version} (`benchmarks/.venv-ray`), 3 replicas of "
        f"the same model called through its handle from the same loop, with {checks}; "
        f"{len(base)} loops of ft, then {len(arms['default']['baseline'])} of each Ray "
        f"setting, one sample per loop.",
    )
    for key, measure, unit, scale in (
        ("p50_ms", "p50 latency", "s", 1e-3),
        ("p99_ms", "p99 latency", "s", 1e-3),
        ("rps", "throughput", "req/s", 1.0),
    ):
        for settings, ray in arms.items():
            add(
                t,
                measure,
                unit,
                values(base, key, scale),
                reference=values(ray["baseline"], key, scale),
                reference_name=f"Ray Serve, {settings} checks",
            )
    tables = [t]
    faults = [f for f in ("kill", "hang") if f in out]
    if faults:
        runs = {f: len(out[f]) for f in faults}
        t = Table(
            "ray-faults",
            "One replica killed or hung: ft.serve against Ray Serve",
            f"{loop_setup(args)}; one replica's process SIGKILLed or SIGSTOPped after "
            f"{args.requests // 3} answers; Ray Serve {version} with {checks}, its requests "
            f"capped at 10 s (it has no deadline of its own); "
            f"{', '.join(f'{n} {f} runs' for f, n in runs.items())} of ft, "
            f"{args.ray_runs} of each fault and Ray setting; one sample per run; p99s are "
            f"of the answered requests; Ray's replicas serving are its controller's count.",
        )
        for fault in faults:
            ours = out[fault]
            answered = [args.requests - r["failed"] for r in ours]
            for settings, ray in arms.items():
                rows = ray["runs"][fault]
                errors = sorted({e for r in rows for e in r.get("errors", [])})
                add(
                    t,
                    f"{fault}: requests answered of {args.requests}",
                    "count",
                    answered,
                    reference=[args.requests - r["failed"] for r in rows],
                    reference_name=f"Ray Serve, {settings} checks",
                    detail=f"Ray Serve's errors: {', '.join(errors)}" if errors else "",
                )
            for settings, ray in arms.items():
                add(
                    t,
                    f"{fault}: p99 latency of the loop",
                    "s",
                    values(ours, "p99_ms", 1e-3),
                    reference=values(ray["runs"][fault], "p99_ms", 1e-3),
                    reference_name=f"Ray Serve, {settings} checks",
                )
            if fault == "kill":
                for settings, ray in arms.items():
                    add(
                        t,
                        "kill -> 3 replicas serving again",
                        "s",
                        values(ours, "back_s"),
                        reference=values(ray["runs"]["kill"], "back_to_3_s"),
                        reference_name=f"Ray Serve, {settings} checks",
                    )
        tables.append(t)
    return tables


def fallback_own_s() -> float:
    x = torch.zeros(4, 32)
    t = time.perf_counter()
    for _ in range(1000):
        popularity(x)
    return (time.perf_counter() - t) / 1000


if __name__ == "__main__":
    main()
