"""The HTTP side of the serving benchmarks: one keep-alive connection per caller thread,
JSON in and out, as a web client of a model would call it. Used by ``bench_http.py``
for ft's Jupyter route and by ``_ray_serve_http_arm.py`` for Ray Serve's HTTP proxy, so
both arms pay the same client costs."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class HTTPFailed(Exception):
    """A reply other than 200: ``status`` and the start of the body."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:200]!r}")
        self.status = status


@dataclass(frozen=True)
class Reply:
    """What the caller saw: who answered (ft's replica id, Ray's replica pid) and when."""

    source: str
    answered: float  # time.perf_counter() at the reply


def json_caller(
    port: int, path: str, headers: dict[str, str], source: Callable[[dict[str, Any]], str]
) -> Callable[[Any], Reply]:
    """``call(x)``: POST ``{"inputs": x.tolist()}`` to ``127.0.0.1:port/path`` on this
    thread's connection (opened again after an error), and name the reply's source."""
    local = threading.local()
    sent = {"Content-Type": "application/json", **headers}

    def call(x: Any) -> Reply:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("POST", path, body=json.dumps({"inputs": x.tolist()}), headers=sent)
            response = conn.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            local.conn = None
            raise
        if response.status != 200:
            raise HTTPFailed(response.status, body)
        return Reply(source(json.loads(body)), time.perf_counter())

    return call


def first_reply_from(
    call: Callable[[Any], Reply], x: Any, new: Callable[[str], bool], timeout: float = 120
) -> float | None:
    """Keep calling until a reply comes from a source ``new`` accepts; its perf time, or
    None after ``timeout`` (failures in between are what a client sees: retried)."""
    end = time.perf_counter() + timeout
    while time.perf_counter() < end:
        try:
            reply = call(x)
        except Exception:
            time.sleep(0.005)
            continue
        if new(reply.source):
            return reply.answered
    return None


def all_sources(
    call: Callable[[Any], Reply], xs: list[Any], callers: int, want: int = 3, timeout: float = 120
) -> set[str]:
    """The sources that answer loops of ``callers`` concurrent callers, once ``want``
    of them do (an idle router may send sequential calls to one replica only)."""
    from ft_notebook.testing.serving import closed_loop

    end = time.perf_counter() + timeout
    while True:
        seen = {o.answer.source for o in closed_loop(call, xs[:120], callers=callers).answers}
        if len(seen) >= want:
            return seen
        if time.perf_counter() > end:
            raise RuntimeError(f"only {sorted(seen)} answered within {timeout} s")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def loop_stats(result: Any) -> dict[str, Any]:
    """p50 / p99 latency (ms), requests/s and failures of one closed loop."""
    latencies = [o.seconds for o in result.answers]
    span = max(o.started + o.seconds for o in result.outcomes) - min(
        o.started for o in result.outcomes
    )
    return {
        "p50_ms": quantile(latencies, 0.5) * 1e3 if latencies else None,
        "p99_ms": quantile(latencies, 0.99) * 1e3 if latencies else None,
        "rps": len(latencies) / span,
        "failed": len(result.errors),
    }


def fault_run(
    call: Callable[[Any], Reply],
    xs: list[Any],
    callers: int,
    kill: Callable[[], None],
    new: Callable[[str], bool],
) -> dict[str, Any]:
    """A closed loop with ``kill()`` after a third of the answers; then the time from the
    kill's end to the first answer from a source ``new`` accepts (during the loop or,
    if none came in it, from calls made after it)."""
    from ft_notebook.testing.serving import closed_loop

    mark: dict[str, float] = {}

    def inject() -> None:
        kill()
        mark["killed"] = time.perf_counter()

    result = closed_loop(call, xs, callers=callers, after={len(xs) // 3: inject})
    during = [
        o.answer.answered
        for o in result.answers
        if o.started > mark["killed"] and new(o.answer.source)
    ]
    first = min(during) if during else first_reply_from(call, xs[0], new)
    return {
        **loop_stats(result),
        "first_new_answer_s": None if first is None else first - mark["killed"],
    }
