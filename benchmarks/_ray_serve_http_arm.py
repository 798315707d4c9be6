"""Ray Serve's side of bench_http.py, run by ``benchmarks/.venv-ray``'s Python.

The same model (``small_mlp``), inputs, callers and client (``_http_loop``) as ft's
side, through Ray Serve's HTTP proxy: 3 replicas of a deployment that reads the JSON
body and answers the outputs and its pid. Health checks as ``_ray_serve_arm.py``'s
``fast`` settings (a check every 0.1 s, 0.5 s timeout), the quickest Ray documents.
Prints one JSON object after ``MARK``.

    benchmarks/.venv-ray/bin/python benchmarks/_ray_serve_http_arm.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import time
from typing import Any

import ray
import torch
from _http_loop import all_sources, fault_run, json_caller, loop_stats
from ray import serve

from ft_notebook.testing.serving import closed_loop, inputs, small_mlp

MARK = "ft-bench-result: "


@serve.deployment(
    num_replicas=3,
    ray_actor_options={"num_cpus": 0.1},
    health_check_period_s=0.1,
    health_check_timeout_s=0.5,
)
class MLP:
    def __init__(self) -> None:
        torch.set_num_threads(1)
        self.model = small_mlp().eval()

    async def __call__(self, request: Any) -> dict[str, Any]:
        body = await request.json()
        with torch.inference_mode():
            y = self.model(torch.tensor(body["inputs"], dtype=torch.float32))
        return {"outputs": y.tolist(), "pid": os.getpid()}


def running_replicas() -> int:
    status = serve.status().applications["mlp"]
    return sum(d.replica_states.get("RUNNING", 0) for d in status.deployments.values())


def wait_for_3(timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while running_replicas() != 3:
        if time.monotonic() > end:
            raise TimeoutError("Ray Serve did not get back to 3 running replicas")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--callers", type=int, default=8)
    args = parser.parse_args()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(MLP.bind(), name="mlp", route_prefix="/mlp")
    call = json_caller(port, "/mlp", {}, lambda reply: str(reply["pid"]))
    xs = inputs(args.requests)
    all_sources(call, xs, args.callers)  # warm-up, every replica answering
    out: dict[str, Any] = {"ray": ray.__version__, "baseline": [], "kill": [], "all": []}
    out["baseline"] = [loop_stats(closed_loop(call, xs, callers=args.callers)) for _ in range(5)]
    for fault in ("kill", "all"):
        for _ in range(args.runs):
            wait_for_3()
            before = all_sources(call, xs, args.callers)
            victims = sorted(before)[:1] if fault == "kill" else sorted(before)

            def kill(victims: list[str] = victims) -> None:
                for pid in victims:
                    os.kill(int(pid), signal.SIGKILL)

            row = fault_run(call, xs, args.callers, kill, lambda s, b=before: s not in b)
            out[fault].append(row)
    wait_for_3()
    print(MARK + json.dumps(out), flush=True)  # Ray prints on stdout too
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
