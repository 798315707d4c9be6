"""The router's rules for one request, on its own event loop with the replicas'
answers scripted (no cluster): a request that loses two replicas fails alone and never
reaches a third; one over ``max_request_bytes`` is refused before it is sent; a large
one is never hedged; a closed service takes no call, not even its fallback's."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
import torch

from ft_notebook.exceptions import PoisonRequest, RequestTooLarge, ServiceClosed
from ft_notebook.serve._policy import request_bytes
from ft_notebook.serve._replies import ReplicaFailed
from ft_notebook.serve._rotation import ReplicaView
from ft_notebook.serve._router import Router
from ft_notebook.serve._service import _settings, auto_request_bytes

pytestmark = pytest.mark.unit


class Scripted:
    """The replicas' answers: each attempt on a replica plays the next of its outcomes
    ("lost": its connection breaks; "slow": an answer after 0.3 s; "slow-lost": lost
    after 0.3 s; "poisoned": the sandbox
    that ran it alone died; else at once). ``isolated``: the attempts asked to run in
    a fork (None: not)."""

    def __init__(self, router: Router, outcomes: dict[str, list[str]]) -> None:
        self.outcomes, self.sent = outcomes, []
        self.isolated: list[float | None] = []
        router._attempt = self.attempt  # type: ignore[method-assign]

    def attempt(
        self, view: ReplicaView, x: Any, isolated_s: float | None = None
    ) -> asyncio.Task[Any]:
        self.sent.append(view.key)
        self.isolated.append(isolated_s)
        outcome = self.outcomes[view.key].pop(0) if self.outcomes[view.key] else "ok"

        async def answer() -> tuple[dict[str, Any], float]:
            if outcome.startswith("slow"):
                await asyncio.sleep(0.3)
            if outcome.endswith("lost"):
                raise ReplicaFailed("CommClosedError: in <TCP>: Stream is closed", True)
            if outcome == "poisoned":
                error = f"the sandbox of replica {view.key} that ran it alone was killed by SIGKILL"
                return {"status": "poisoned", "error": error}, 0.001
            return {"status": "OK", "y": view.key}, 0.001

        task = asyncio.ensure_future(answer())
        view.attempts.add(task)
        task.add_done_callback(view.attempts.discard)
        return task


def _router(fallback: Any = None, alive: tuple[str, ...] = ("svc/2",), **routing: Any) -> Router:
    """Three replicas; those in ``alive`` answer a ping (the others' workers are gone)."""
    router = Router(None, "svc", _settings({"retries": 2, **routing}), fallback, 3)
    for i in range(3):
        row = {"replica": f"svc/{i}", "index": i, "worker": str(i), "address": f"a{i}"}
        router.views[f"svc/{i}"] = ReplicaView({**row, "incarnation": "x"}, 3, 1.0)

    async def answers(view: ReplicaView) -> bool:
        return view.key in alive

    router.rotation.answers = answers  # type: ignore[method-assign]
    return router


def test_a_request_that_lost_its_replica_runs_alone_where_it_is_re_sent() -> None:
    """Re-sent after its replica was lost, a request runs in a fork of the next
    replica's process, given what is left of its deadline; the first try is not."""
    router = _router()
    script = Scripted(router, {"svc/0": ["lost"], "svc/1": [], "svc/2": []})
    answer = asyncio.run(router.call(torch.zeros(2, 64), hedge=False, deadline_s=5.0))
    assert answer.replica == "svc/1"
    first, again = script.isolated
    assert first is None
    assert again is not None
    assert 4.0 < again <= 5.0


def test_with_the_sandbox_off_a_re_sent_request_runs_in_the_replica() -> None:
    """``sandbox: false`` (a model that cannot be forked safely): nothing is sent to a
    sandbox, and a replica takes one suspect at a time, whatever its pings say."""
    router = _router(sandbox=False)
    script = Scripted(router, {"svc/0": ["lost"], "svc/1": [], "svc/2": []})
    assert asyncio.run(router.call(torch.zeros(2, 64), hedge=False)).replica == "svc/1"
    assert script.isolated == [None, None]


def test_a_request_that_kills_the_fork_it_runs_alone_in_costs_one_replica() -> None:
    """A poison request lost two replicas, the first and the one it was re-sent to.
    Run alone in a fork there, it kills the fork: it fails as PoisonRequest at once,
    one replica lost, and the third never sees it."""
    router = _router(fallback=lambda x: "fallback")
    script = Scripted(router, {"svc/0": ["lost"], "svc/1": ["poisoned"], "svc/2": []})
    with pytest.raises(
        PoisonRequest, match=r"256 B .* lost replica svc/0, and the sandbox of"
    ) as e:
        asyncio.run(router.call(torch.zeros(2, 32), hedge=False))
    assert "killed by SIGKILL" in str(e.value)
    assert script.sent == ["svc/0", "svc/1"]  # not the third, and not the fallback
    assert asyncio.run(router.call(torch.zeros(1, 64))).replica == "svc/1"  # it serves on


def test_a_request_that_loses_two_replicas_fails_alone_and_never_reaches_a_third() -> None:
    """Where the replica it is re-sent to cannot fork (on CUDA), it runs there."""
    router = _router(fallback=lambda x: "fallback")
    script = Scripted(router, {"svc/0": ["lost"], "svc/1": ["lost"], "svc/2": []})
    x = torch.zeros(1000, 64)
    with pytest.raises(PoisonRequest, match=r"250.00 kiB .* lost two replicas, svc/0 and svc/1"):
        asyncio.run(router.call(x, hedge=False))
    assert script.sent == ["svc/0", "svc/1"]  # not the third, and not the fallback
    # the next request, another input, goes to the replica that is left
    assert asyncio.run(router.call(torch.zeros(1, 64))).replica == "svc/2"


def test_replicas_lost_together_are_an_outage_not_a_poison_request() -> None:
    """Every worker killed at once: the request lost two replicas, but the third does
    not answer either. It goes the usual way, to the fallback, not PoisonRequest."""
    router = _router(fallback=lambda x: "fallback", alive=())
    script = Scripted(router, {"svc/0": ["lost"], "svc/1": ["lost"], "svc/2": ["lost"]})
    answer = asyncio.run(router.call(torch.zeros(2, 64), hedge=False))
    assert answer.value == "fallback"
    assert script.sent == ["svc/0", "svc/1", "svc/2"]


def test_an_innocent_request_lost_with_a_poison_one_is_not_called_poison() -> None:
    """A poison request and an innocent one were on the replica it killed. Re-sent both
    to the least busy replica, the poison one killed it too, and both had lost two
    replicas: the innocent request failed as PoisonRequest. A replica takes one such
    request at a time, so only the poison one loses two."""
    router = _router()
    router.views["svc/2"].inflight = 5  # busier: least outstanding would pick svc/1 twice
    outcomes = {"svc/0": ["lost", "lost"], "svc/1": ["lost"], "svc/2": []}
    script = Scripted(router, outcomes)

    async def both() -> list[Any]:
        calls = [router.call(torch.zeros(2, 64), hedge=False) for _ in range(2)]
        return await asyncio.gather(*calls, return_exceptions=True)

    poison, innocent = asyncio.run(both())
    assert isinstance(poison, PoisonRequest), poison
    assert innocent.replica == "svc/2", innocent
    assert sorted(script.sent) == ["svc/0", "svc/0", "svc/1", "svc/2"]


def test_a_replica_that_forks_takes_several_suspects_at_once() -> None:
    """Suspects run in forks there, so a poison one cannot take the others down: two
    requests lost on one replica are re-sent to the least busy one together, with no
    wait for each other (the kill benchmark's p99 rose from 1.6x to 2.1x the
    no-fault one while a forking replica still took them one at a time)."""
    router = _router()
    for view in router.views.values():
        view.forks = True
    router.views["svc/2"].inflight = 5  # busier: least outstanding picks svc/1 twice
    script = Scripted(router, {"svc/0": ["lost", "lost"], "svc/1": [], "svc/2": []})

    async def both() -> list[Any]:
        calls = [router.call(torch.zeros(2, 64), hedge=False) for _ in range(2)]
        return await asyncio.gather(*calls)

    answers = asyncio.run(both())
    assert [a.replica for a in answers] == ["svc/1", "svc/1"]
    assert sorted(script.sent) == ["svc/0", "svc/0", "svc/1", "svc/1"]


def test_a_request_whose_replica_is_lost_once_is_re_sent_and_answered() -> None:
    router = _router()
    script = Scripted(router, {"svc/0": ["lost"], "svc/1": [], "svc/2": []})
    answer = asyncio.run(router.call(torch.zeros(2, 64), hedge=False))
    assert answer.replica == "svc/1"
    assert answer.retries == 1
    assert script.sent == ["svc/0", "svc/1"]


def test_a_request_over_max_request_bytes_is_refused_before_it_is_sent() -> None:
    router = _router(max_request_bytes=4096)
    script = Scripted(router, {"svc/0": [], "svc/1": [], "svc/2": []})
    with pytest.raises(RequestTooLarge, match=r"of 12.50 kiB .* max_request_bytes \(4.00 kiB\)"):
        asyncio.run(router.call(torch.zeros(100, 32)))
    assert script.sent == []
    assert asyncio.run(router.call(torch.zeros(2, 32))).replica is not None


def test_a_request_over_hedge_max_bytes_is_never_hedged() -> None:
    def slow_first() -> tuple[Router, Scripted]:
        router = _router(hedge_budget=1.0, hedge_after_min_s=0.001, hedge_max_bytes=1024)
        for _ in range(40):  # answers of 5 ms: a hedge time of 5 ms
            router.latencies.add(0.005)
            router.counts["answered"] += 1
        return router, Scripted(router, {"svc/0": ["slow"], "svc/1": [], "svc/2": []})

    router, script = slow_first()
    small = asyncio.run(router.call(torch.zeros(2, 32)))  # 256 bytes: hedged
    assert small.hedged
    assert small.replica != "svc/0"
    router, script = slow_first()
    large = asyncio.run(router.call(torch.zeros(100, 32)))  # 12,800 bytes: waits it out
    assert not large.hedged
    assert script.sent == ["svc/0"]


def _hedging(outcomes: dict[str, list[str]]) -> tuple[Router, Scripted]:
    router = _router(hedge_budget=1.0, hedge_after_min_s=0.001)
    for _ in range(40):  # answers of 5 ms: a hedge time of 5 ms
        router.latencies.add(0.005)
        router.counts["answered"] += 1
    return router, Scripted(router, outcomes)


def test_a_hedge_runs_alone_and_one_that_kills_its_sandbox_ends_a_request_lost_too() -> None:
    """A poison request slow to crash its replica was hedged to a second one, which it
    crashed too (the benchmark saw 2 workers die in every crashing try). A hedge runs
    in its replica's sandbox: the sandbox dies, the first replica dies, and the request
    fails alone, a PoisonRequest."""
    router, script = _hedging({"svc/0": ["slow-lost"], "svc/1": ["poisoned"], "svc/2": []})
    with pytest.raises(PoisonRequest, match=r"256 B .* lost replica svc/0, and the sandbox of"):
        asyncio.run(router.call(torch.zeros(2, 32), deadline_s=5.0))
    assert script.sent == ["svc/0", "svc/1"]  # never a third
    first, hedge = script.isolated
    assert first is None
    assert hedge is not None
    assert 4.0 < hedge <= 5.0


def test_a_hedge_whose_sandbox_died_leaves_the_first_try_to_answer() -> None:
    """A sandbox can die of something else (the kernel's OOM killer takes it first):
    the request waits for its first try, which answers, instead of failing at once."""
    router, script = _hedging({"svc/0": ["slow"], "svc/1": ["poisoned"], "svc/2": []})
    answer = asyncio.run(router.call(torch.zeros(2, 32), deadline_s=5.0))
    assert answer.replica == "svc/0"
    assert script.sent == ["svc/0", "svc/1"]


def test_a_closed_service_takes_no_call_not_even_its_fallback() -> None:
    router = _router(fallback=lambda x: "fallback")
    router.rotation.closed = True
    with pytest.raises(ServiceClosed, match=r"'svc' was closed .* ft.service\('svc'\)"):
        asyncio.run(router.call(torch.zeros(2, 32)))
    assert router.fallback_here(torch.zeros(2, 32)) is None


def test_request_sizes_are_the_bytes_of_their_arrays() -> None:
    import numpy as np

    assert request_bytes(torch.zeros(4_000_000, 64)) == 1_024_000_000
    assert request_bytes(np.zeros((10, 8), np.float32)) == 320
    assert request_bytes({"a": torch.zeros(10), "b": [torch.zeros(5, dtype=torch.float64)]}) == 80


def test_auto_max_request_bytes_is_a_32nd_of_the_smallest_worker() -> None:
    workers = {"a": {"memory_limit": 8 * 2**30}, "b": {"memory_limit": 4 * 2**30}}
    assert auto_request_bytes({"workers": workers}) == 128 * 2**20
    assert auto_request_bytes({"workers": {"a": {"memory_limit": 2**20}}}) == 2**20  # floor


def test_the_fallback_answers_at_its_pace_and_no_faster() -> None:
    from ft_notebook.serve._policy import Pace

    pace = Pace(100.0)
    delays = [pace.delay() for _ in range(50)]  # booked at once, as 50 callers would
    assert delays[0] == 0.0
    assert delays[-1] >= 0.48  # the 50th waits its turn: 49 intervals of 10 ms
    assert all(b > a for a, b in itertools.pairwise(delays))
    assert Pace(0).delay() == 0.0  # 0: no limit
