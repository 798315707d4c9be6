"""A request that lost two replicas: poison, or an outage that takes every replica?
(:func:`ft_notebook.serve._suspects.others_answer`)."""

from __future__ import annotations

import asyncio
import time

from ft_notebook.serve._rotation import ReplicaView
from ft_notebook.serve._suspects import _TOGETHER_S, InFlight, others_answer


def _views(n: int) -> dict[str, ReplicaView]:
    rows = [
        {"replica": f"svc/{i}", "index": i, "worker": str(i), "address": f"a{i}"} for i in range(n)
    ]
    return {r["replica"]: ReplicaView({**r, "incarnation": "x"}, 3, 1.0) for r in rows}


def _ask(
    views: dict[str, ReplicaView], gone_after_s: float | None
) -> tuple[bool, float, list[str]]:
    """others_answer after svc/0 and svc/1 were lost under the request; svc/2 leaves
    the rotation ``gone_after_s`` later (never: None). Its result, how long it took, and
    the replicas it pinged."""
    request = InFlight(views)
    pinged: list[str] = []

    async def answers(view: ReplicaView) -> bool:
        pinged.append(view.key)
        return True

    async def main() -> tuple[bool, float]:
        if gone_after_s is not None:
            breaker = views["svc/2"].breaker
            asyncio.get_running_loop().call_later(
                gone_after_s, lambda: breaker.failed("lost", at_once=True)
            )
        started = time.monotonic()
        found = await others_answer(views, {"svc/0", "svc/1"}, request, answers)
        return found, time.monotonic() - started

    found, took = asyncio.run(main())
    return found, took, pinged


def test_when_the_last_replica_goes_too_the_outage_is_known_at_once() -> None:
    # every worker killed, ~30 ms apart: the third replica leaves the rotation soon
    # after; the requests caught on the first two waited 0.3 s for nothing (the "all"
    # table's caught requests: 300-350 ms in 9-12 of 20 runs)
    found, took, pinged = _ask(_views(3), gone_after_s=0.03)
    assert found is False
    assert pinged == []
    assert took < _TOGETHER_S / 2, took


def test_a_replica_still_in_rotation_is_asked_after_the_wait() -> None:
    # the wait is what keeps a replica about to be killed from vouching for the input
    found, took, pinged = _ask(_views(3), gone_after_s=None)
    assert found is True
    assert pinged == ["svc/2"]
    assert took >= _TOGETHER_S * 0.95, took


def test_a_replica_out_since_before_is_waited_for_as_it_may_come_back() -> None:
    # its breaker opened before the request's second loss; a probe closes it within the
    # wait: it can still witness the input, as the fixed wait let it
    views = _views(3)
    views["svc/2"].breaker.failed("an earlier timeout", at_once=True)
    request = InFlight(views)
    pinged: list[str] = []

    async def answers(view: ReplicaView) -> bool:
        pinged.append(view.key)
        return True

    async def main() -> bool:
        asyncio.get_running_loop().call_later(0.1, views["svc/2"].breaker.succeeded)
        return await others_answer(views, {"svc/0", "svc/1"}, request, answers)

    assert asyncio.run(main()) is True
    assert pinged == ["svc/2"]
