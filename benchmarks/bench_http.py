"""Serving over HTTP: ft's Jupyter route against Ray Serve's HTTP proxy, same scenarios.

A model served to a web client goes through HTTP, not through a Python handle. ft's
arm: a private cluster (``ft.cluster(workers=3)``, workers forked as it forks them),
``ft.serve(small_mlp, 3)`` (no fallback: both arms answer from replicas only), and a
real ``jupyter server`` with ft_notebook's server extension, called on
``POST /ft-notebook/api/services/<name>/predict`` with the server's token. Ray's arm
(``_ray_serve_http_arm.py`` in ``benchmarks/.venv-ray``): the same model behind Ray
Serve's HTTP proxy, health checks every 0.1 s. Both arms use the same client
(``_http_loop``: one keep-alive connection per caller thread, JSON in and out), the same
inputs (batches of 4) and ``--callers`` closed-loop callers, one arm after the other.

- **no fault**: p50, p99, requests/s of 5 loops of ``--requests``.
- **kill**: one replica's process SIGKILLed after a third of the answers: failed
  requests, and the kill -> the first answer from its replacement (ft: the same replica
  id answering again; Ray: a replica pid not seen before).
- **all**: every replica's process SIGKILLed: failed requests, and the last kill -> the
  first answer from a replica.

    .venv/bin/python benchmarks/bench_http.py [--runs 5] [--requests 600]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import torch
from _http_loop import all_sources, fault_run, json_caller, loop_stats
from _peers import peer_python
from _report import Goal, Table, save

import ft_notebook as ft
from ft_notebook.cluster.chaos import kill_worker
from ft_notebook.testing import poll_for
from ft_notebook.testing.serving import closed_loop, inputs, small_mlp

HERE = Path(__file__).resolve().parent
RAY_VENV = HERE / ".venv-ray"
RAY = "ray[serve]==2.60.0"
MARK = "ft-bench-result: "
TITLE = "Serving over HTTP"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def jupyter_server(port: int, token: str, root: Path) -> subprocess.Popen[bytes]:
    """A real ``jupyter server`` with this venv's extensions (ft_notebook's included),
    seeing the same ft data folder (and so the same clusters) as this process."""
    command = [
        sys.executable,
        "-m",
        "jupyter_server",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={root}",
        "--allow-root",
    ]
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(root / "runtime"))
    log = (root / "server.log").open("wb")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

    def up() -> bool:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/status", headers={"Authorization": f"token {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    poll_for(up, timeout=60, what="jupyter server to answer")
    return server


def ft_arm(args: argparse.Namespace, xs: list[Any]) -> dict[str, Any]:
    name = f"http-{uuid.uuid4().hex[:6]}"
    client = ft.cluster(name=name, workers=3, set_as_default=False)
    root = Path(tempfile.mkdtemp(prefix="ft-bench-http-"))
    token = uuid.uuid4().hex
    port = free_port()
    server = jupyter_server(port, token, root)
    svc = None
    try:
        svc = ft.serve(small_mlp, 3, name="mlp", cluster=client, example=torch.zeros(1, 32))
        call = json_caller(
            port,
            f"/ft-notebook/api/services/mlp/predict?cluster={name}",
            {"Authorization": f"token {token}"},
            lambda reply: str(reply["replica"]),
        )
        all_sources(call, xs, args.callers)  # the server's handle has all three in rotation
        for x in xs[:100]:
            call(x)
        out: dict[str, Any] = {"baseline": [], "kill": [], "all": []}
        out["baseline"] = [
            loop_stats(closed_loop(call, xs, callers=args.callers)) for _ in range(5)
        ]
        for fault in ("kill", "all"):
            for _ in range(args.runs):
                all_sources(call, xs, args.callers)
                table = svc.table()["replicas"]
                if fault == "kill":
                    victims = [next(r["worker"] for r in table if r["index"] == 1)]

                    def new(source: str) -> bool:
                        return source == "mlp/1"
                else:
                    victims = sorted({str(r["worker"]) for r in table})

                    def new(source: str) -> bool:
                        return True

                def kill(victims: list[str] = victims) -> None:
                    for worker in victims:
                        kill_worker(client, worker)

                out[fault].append(fault_run(call, xs, args.callers, kill, new))
                print(fault, json.dumps(out[fault][-1]), file=sys.stderr, flush=True)
        return out
    finally:
        if svc is not None:
            svc.close()
        server.terminate()
        server.wait(30)
        client.close()
        ft.down(name)


def ray_arm(args: argparse.Namespace) -> dict[str, Any]:
    python = peer_python(RAY_VENV, RAY, "ray.serve")
    command = [python, str(HERE / "_ray_serve_http_arm.py"), "--runs", str(args.runs)]
    command += ["--requests", str(args.requests), "--callers", str(args.callers)]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent), RAY_DEDUP_LOGS="0")
    done = subprocess.run(
        command,
        env=env,
        capture_output=True,
        text=True,
        cwd=HERE,
    )
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            result: dict[str, Any] = json.loads(line[len(MARK) :])
            return result
    raise RuntimeError(
        f"Ray's HTTP arm gave no result:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


def values(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) is not None]


def tables(ours: dict[str, Any], ray: dict[str, Any], args: argparse.Namespace) -> list[Table]:
    t = Table(
        "http",
        "Serving over HTTP: ft's Jupyter route against Ray Serve's HTTP proxy",
        f"3 replicas of small_mlp, {args.callers} closed-loop callers over keep-alive HTTP "
        f"connections, {args.requests} requests (batches of 4) a loop; ft: a private "
        "cluster of 3 forked workers and jupyter_server's predict route with its token; "
        f"Ray Serve {ray['ray']} behind its HTTP proxy, health checks every 0.1 s; "
        f"{args.runs} runs per fault and arm, one arm after the other.",
    )
    b_ft, b_ray = ours["baseline"], ray["baseline"]
    t.row(
        "no fault: p50 latency",
        "s",
        [v / 1e3 for v in values(b_ft, "p50_ms")],
        reference=[v / 1e3 for v in values(b_ray, "p50_ms")],
        reference_name="Ray Serve HTTP",
        goal=Goal("ratio", "<=", 1.0),
    )
    t.row(
        "no fault: p99 latency",
        "s",
        [v / 1e3 for v in values(b_ft, "p99_ms")],
        reference=[v / 1e3 for v in values(b_ray, "p99_ms")],
        reference_name="Ray Serve HTTP",
        goal=Goal("ratio", "<=", 1.0),
    )
    t.row(
        "no fault: requests/s",
        "requests/s",
        values(b_ft, "rps"),
        reference=values(b_ray, "rps"),
        reference_name="Ray Serve HTTP",
        goal=Goal("ratio", ">=", 1.0),
    )
    for fault, what, limit in (
        ("kill", "one replica killed -> first answer from its replacement", 1.0),
        ("all", "every replica killed -> first answer from a replica", 1.5),
    ):
        t.row(
            what,
            "s",
            values(ours[fault], "first_new_answer_s"),
            reference=values(ray[fault], "first_new_answer_s"),
            reference_name="Ray Serve HTTP",
            goal=Goal("value", "<=", limit),
        )
        t.row(
            f"{fault}: failed requests",
            "count",
            values(ours[fault], "failed"),
            reference=values(ray[fault], "failed"),
            reference_name="Ray Serve HTTP",
            goal=Goal("value", "<=", 0) if fault == "kill" else None,
        )
    # every replica gone: ft answers at once (503, no replica; a fallback= would answer
    # instead), Ray holds the request until a replica is back
    t.row(
        "all: p99 latency",
        "s",
        [v / 1e3 for v in values(ours["all"], "p99_ms")],
        reference=[v / 1e3 for v in values(ray["all"], "p99_ms")],
        reference_name="Ray Serve HTTP",
    )
    return [t]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--callers", type=int, default=8)
    args = parser.parse_args()
    xs = inputs(args.requests)
    ours = ft_arm(args, xs)
    print("ft", json.dumps(ours), file=sys.stderr, flush=True)
    ray = ray_arm(args)
    print("ray", json.dumps(ray), file=sys.stderr, flush=True)
    for fault in ("kill", "all"):
        for arm, got in (("ft", ours), ("ray", ray)):
            firsts = values(got[fault], "first_new_answer_s")
            if firsts:
                print(f"{arm} {fault}: median {statistics.median(firsts):.3f} s", file=sys.stderr)
    save("http", TITLE, tables(ours, ray, args))


if __name__ == "__main__":
    main()
