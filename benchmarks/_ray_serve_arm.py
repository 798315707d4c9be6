"""Ray Serve's side of bench_serve.py, run by ``benchmarks/.venv-ray``'s Python.

The same model (``ft_notebook.testing.serving.small_mlp``), inputs and closed loop of
callers as ft's side; 3 replicas of a deployment called through its handle from the
callers' threads. ``--settings default`` leaves Ray Serve's health checks at their
defaults (every 10 s, 30 s timeout); ``fast`` sets the smallest it documents working
values for (a check every 0.1 s, 0.5 s timeout). Prints one JSON object.

    benchmarks/.venv-ray/bin/python benchmarks/_ray_serve_arm.py --settings fast --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from typing import Any

import ray
import torch
from ray import serve

from ft_notebook.testing.serving import closed_loop, inputs, small_mlp

MARK = "ft-bench-result: "
SETTINGS = {
    "default": {},
    "fast": {"health_check_period_s": 0.1, "health_check_timeout_s": 0.5},
}


def deployment(settings: str) -> Any:
    @serve.deployment(num_replicas=3, ray_actor_options={"num_cpus": 0.1}, **SETTINGS[settings])
    class MLP:
        def __init__(self) -> None:
            torch.set_num_threads(1)
            self.model = small_mlp().eval()

        def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
            with torch.inference_mode():
                return self.model(x), os.getpid()

    return MLP


def running_replicas(app: str) -> int:
    status = serve.status().applications[app]
    return sum(d.replica_states.get("RUNNING", 0) for d in status.deployments.values())


def wait_for(predicate: Any, timeout: float) -> float | None:
    """Seconds until ``predicate()`` held, or None within ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--settings", choices=SETTINGS, default="fast")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--request-timeout", type=float, default=10.0)
    args = parser.parse_args()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    app = f"mlp-{args.settings}"
    handle = serve.run(deployment(args.settings).bind(), name=app, route_prefix=None)
    xs = inputs(args.requests)
    pids: set[int] = set()

    def call(x: torch.Tensor) -> Any:
        y, pid = handle.remote(x).result(timeout_s=args.request_timeout)
        pids.add(pid)
        return y

    for x in xs[:50]:  # warm-up
        call(x)
    out: dict[str, Any] = {"ray": ray.__version__, "settings": args.settings, "runs": {}}
    loops = [closed_loop(call, xs, callers=args.callers) for _ in range(3)]
    out["baseline"] = [
        {
            "p50_ms": quantile([o.seconds for o in r.answers], 0.5) * 1e3,
            "p99_ms": quantile([o.seconds for o in r.answers], 0.99) * 1e3,
            "rps": len(r.answers)
            / (max(o.started + o.seconds for o in r.outcomes) - min(o.started for o in r.outcomes)),
            "failed": len(r.errors),
        }
        for r in loops
    ]
    for fault in ("kill", "hang"):
        rows = []
        for _ in range(args.runs):
            wait_for(lambda: running_replicas(app) == 3, 120)
            victim: list[int] = []
            killed_at: list[float] = []

            def inject(
                victim: list[int] = victim, killed_at: list[float] = killed_at, fault: str = fault
            ) -> None:
                pid = sorted(pids)[0]
                victim.append(pid)
                killed_at.append(time.monotonic())
                os.kill(pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)

            pids.clear()
            for x in xs[:10]:
                call(x)
            result = closed_loop(call, xs, callers=args.callers, after={len(xs) // 3: inject})
            if fault == "hang" and victim:
                os.kill(victim[0], signal.SIGCONT)
            back = wait_for(lambda: running_replicas(app) == 3, 120)
            since_fault = time.monotonic() - killed_at[0] if killed_at else None
            latencies = [o.seconds for o in result.answers]
            rows.append(
                {
                    "failed": len(result.errors),
                    "errors": sorted({type(o.error).__name__ for o in result.errors}),
                    "p99_ms": quantile(latencies, 0.99) * 1e3 if latencies else None,
                    "max_ms": max(latencies) * 1e3 if latencies else None,
                    "back_to_3_s": None if back is None else since_fault,
                }
            )
        out["runs"][fault] = rows
    print(MARK + json.dumps(out), flush=True)  # Ray prints on stdout too
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
