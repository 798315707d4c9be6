"""The caller's router: sends each request to a replica and makes sure it is answered.

It runs on the Dask client's event loop, in the caller's process, and talks to the
replicas' workers directly. Which replicas it may send to, and the tier they make, is
its :class:`~._rotation.Rotation`'s. Per request:

    admit (or Overloaded, RequestTooLarge, ServiceClosed at once)
      ─► least outstanding replica whose breaker allows it
      ─► no answer after the observed p95: hedge to a second replica, run there in its
         sandbox (budgeted; never a request over ``hedge_max_bytes``)
      ─► the replica fails under it: re-send to another (budgeted, ``retries``), run
         there in its sandbox, a fork of the replica's process (:mod:`._sandbox`): the
         sandbox dies on it: PoisonRequest, and no second replica was lost. Where a replica cannot
         fork (CUDA), a second replica lost under it while another still answers:
         PoisonRequest, never a third
      ─► no replica can: the fallback answers (tier FALLBACK), else ServiceUnavailable
      ─► the deadline passes: DeadlineExceeded

A replica leaves the rotation at once when the coordinator reports it lost (an event
pushed by the scheduler), when a call to it fails on the connection, when a ping goes
unanswered (the health loop), or after ``breaker_failures`` failures in a row; its
requests in flight are re-sent. It comes back through a half-open probe.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from distributed.protocol.serialize import to_serialize

from ft_notebook.events import Health
from ft_notebook.serve import _refusals as refusals
from ft_notebook.serve import _suspects as suspects
from ft_notebook.serve._policy import Budget, Latencies, Pace, request_bytes
from ft_notebook.serve._replies import ReplicaFailed, outcome
from ft_notebook.serve._rotation import ReplicaView, Rotation
from ft_notebook.serve._suspects import InFlight, others_answer, spread_loss

#: Successful calls seen before hedging starts: a p95 of fewer means little.
_HEDGE_AFTER_SAMPLES = 20
#: Answers between two computations of the hedge time.
_HEDGE_EVERY = 16


@dataclass(frozen=True)
class Answer:
    """A service's answer and where it came from."""

    value: Any
    replica: str | None  # "service/index"; None when the fallback answered
    tier: Health
    retries: int
    hedged: bool
    latency_s: float


def _forget(task: asyncio.Task[Any]) -> None:
    """The answer of an attempt that lost its race: nobody waits for it."""
    if not task.cancelled():
        task.exception()


class Router:
    def __init__(self, client: Any, name: str, settings: Any, fallback: Any, wanted: int) -> None:
        self.client, self.name, self.settings = client, name, settings
        self.fallback = fallback
        self.rotation = Rotation(client, name, settings, wanted)
        self.outstanding = 0
        self.latencies = Latencies()
        # re-sends come in bursts (a replica dies under 8 requests), hedges too (a stalled
        # replica holds several): each bucket holds a few tokens
        self.retry_budget = Budget(settings.retry_budget, burst=10)
        self.hedge_budget = Budget(settings.hedge_budget, burst=5)
        self.fallback_pace = Pace(settings.fallback_rate)
        self.rotation.on_lost = spread_loss
        self.counts = dict(
            requests=0, answered=0, fallback=0, retries=0, hedges=0, shed=0, failed=0
        )
        self._hedge_cache: tuple[int, float] | None = None  # (answered then, hedge time)

    async def start(self) -> None:
        await self.rotation.start()

    async def stop(self) -> None:
        await self.rotation.stop()

    # the rotation's, read where the router's were (the service handle, benchmarks)

    @property
    def views(self) -> dict[str, ReplicaView]:
        return self.rotation.views

    @property
    def tier(self) -> Health:
        return self.rotation.tier

    @property
    def tier_reason(self) -> str:
        return self.rotation.tier_reason

    @property
    def transitions(self) -> list[dict[str, Any]]:
        return self.rotation.transitions

    @property
    def closed(self) -> bool:
        return self.rotation.closed

    # ---- requests

    def _pick(self, exclude: set[str]) -> ReplicaView | None:
        """The least outstanding replica the breakers allow; one holding a call older
        than the hedge time is stalled now (a long call, a pause) and comes last: a
        request queued behind it would wait as long, and need a hedge."""
        now = time.monotonic()
        allowed = [v for v in self.views.values() if v.key not in exclude and v.breaker.allows(now)]
        if not allowed:
            return None
        late = self._hedge_after() or float(self.settings.deadline_s)
        return min(allowed, key=lambda v: (v.stalled(now, late), v.inflight, v.served))

    def _hedge_after(self) -> float | None:
        """The hedge time, recomputed every few answers, not on every pick: sorting the
        window is the router's one cost per request that grows with it."""
        if self.settings.hedge_budget <= 0 or len(self.latencies) < _HEDGE_AFTER_SAMPLES:
            return None
        answered = self.counts["answered"]
        if self._hedge_cache is None or answered - self._hedge_cache[0] >= _HEDGE_EVERY:
            # After the p95, but never later than 3x the median: the answers of a stalled
            # replica are part of the window too, and where they are some 5% of it they
            # push the p95 up to their own latency, and the hedges come too late to help.
            p95 = self.latencies.quantile(0.95) or 0.0
            p50 = self.latencies.quantile(0.5) or 0.0
            delay = max(float(self.settings.hedge_after_min_s), min(p95, 3 * p50))
            self._hedge_cache = (answered, delay)
        return self._hedge_cache[1]

    def _attempt(
        self, view: ReplicaView, x: Any, isolated_s: float | None = None
    ) -> asyncio.Task[Any]:
        """Send ``x`` to ``view``'s replica; ``isolated_s``: run it in the sandbox of the
        replica's process, given that long (a suspect, see :mod:`._sandbox`)."""

        async def send() -> tuple[dict[str, Any], float]:
            started = time.monotonic()
            view.inflight += 1
            view.since.append(started)
            view.breaker.started()
            alone = {} if isolated_s is None else {"isolated": True, "timeout_s": isolated_s}
            try:
                reply = await self.client.rpc(view.address).ft_serve_predict(
                    key=view.key, incarnation=view.incarnation, x=to_serialize(x), **alone
                )
            except (OSError, asyncio.TimeoutError) as e:  # CommClosedError is an OSError
                raise ReplicaFailed(f"{type(e).__name__}: {e}", True) from e
            finally:
                view.inflight -= 1
                view.since.remove(started)
            return reply, time.monotonic() - started

        task = asyncio.ensure_future(send())
        view.attempts.add(task)
        task.add_done_callback(view.attempts.discard)
        return task

    def _alone(self, deadline: float) -> float | None:
        """What is left of the deadline for an attempt run in the replica's sandbox;
        None with ``sandbox`` off: it runs in the replica itself."""
        return max(0.0, deadline - time.monotonic()) if self.settings.sandbox else None

    def check_open(self) -> None:
        if self.closed:
            raise refusals.closed(self.name)

    async def call(
        self,
        x: Any,
        *,
        deadline_s: float | None = None,
        retries: int | None = None,
        hedge: bool = True,
    ) -> Answer:
        s = self.settings
        self.check_open()
        size = request_bytes(x)
        if s.max_request_bytes is not None and size > s.max_request_bytes:
            self.counts["failed"] += 1
            raise refusals.too_large(self.name, size, s.max_request_bytes)
        if self.outstanding >= s.max_queue:
            self.counts["shed"] += 1
            raise refusals.overloaded(self.name, self.outstanding)
        self.outstanding += 1
        self.counts["requests"] += 1
        self.retry_budget.request()
        self.hedge_budget.request()
        try:
            return await self._route(
                x,
                time.monotonic(),
                s.deadline_s if deadline_s is None else deadline_s,
                s.retries if retries is None else retries,
                hedge and size <= s.hedge_max_bytes,
                size,
            )
        finally:
            self.outstanding -= 1

    async def _route(
        self, x: Any, started: float, deadline_s: float, retries: int, hedge: bool, size: int
    ) -> Answer:
        deadline = started + deadline_s
        pending: dict[asyncio.Task[Any], ReplicaView] = {}
        tried: set[str] = set()
        used_retries, errors = 0, []
        lost_under: list[str] = []  # replicas lost or failed while they had it
        hedged = considered = False  # a hedge sent; the hedge time passed (one per request)
        poisoned: dict[str, Any] | None = None  # a hedge's sandbox died on it
        request = InFlight(self.views)
        try:
            while True:
                if not pending:
                    suspect = bool(lost_under)
                    if suspect:
                        view = await suspects.pick_for_suspect(
                            self._pick, self.views, tried, deadline
                        )
                    else:
                        view = self._pick(tried)
                    if view is None:
                        break
                    request.sent(view, suspect=suspect)
                    alone = self._alone(deadline) if suspect else None
                    pending[self._attempt(view, x, alone)] = view
                    considered = considered or suspect  # a suspect is not hedged
                left = deadline - time.monotonic()
                hedge_after = self._hedge_after() if hedge and not considered else None
                if hedge_after is not None:
                    hedge_after -= time.monotonic() - started
                wait = left if hedge_after is None else max(0.0, min(left, hedge_after))
                done, _ = await asyncio.wait(
                    pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    if time.monotonic() >= deadline:
                        asked = sorted(tried | {v.key for v in pending.values()})
                        for task in pending:
                            task.cancel()
                        self.counts["failed"] += 1
                        raise refusals.late(self.name, deadline_s, asked)
                    considered = True
                    # never beside a suspect: the poison request it may be would kill it
                    busy = suspects.unsafe_beside_a_suspect(self.views)
                    other = self._pick(tried | busy | {v.key for v in pending.values()})
                    if other is not None and self.hedge_budget.take():
                        hedged = True
                        self.counts["hedges"] += 1
                        request.sent(other, suspect=False)
                        # in the sandbox: a request slow to answer may be one slow to
                        # crash its replica, and a hedge would take a second one with it
                        pending[self._attempt(other, x, self._alone(deadline))] = other
                    continue
                for task in done:
                    view = pending.pop(task)
                    if task.cancelled() or task.exception() is not None:
                        spread_loss(view)  # before anyone is re-sent
                    reply, why, at_once, reason = outcome(task, view.key)
                    if reply is not None and reply["status"] == "OK":
                        # a loser's replica works on it still: let it finish, so that its
                        # load shows (and a loser that finished too is read, not left)
                        for loser in [*pending, *(t for t in done if t is not task)]:
                            loser.add_done_callback(_forget)
                        return self._answered(
                            view, reply, task.result()[1], started, used_retries, hedged
                        )
                    if reply is not None and reply["status"] == "poisoned" and pending:
                        poisoned = reply  # a hedge killed its sandbox: the first may answer
                        request.handled(view)
                        continue
                    if reply is not None and reply["status"] in ("rejected", "poisoned"):
                        for loser in pending:
                            loser.cancel()
                        self.counts["failed"] += 1
                        if reply["status"] == "poisoned":  # it killed the sandbox it ran in
                            raise refusals.poison_alone(self.name, size, lost_under, reply)
                        raise refusals.rejected(self.name, size, view.key, reply)
                    tried.add(view.key)
                    errors.append(f"{view.key}: {why}")
                    view.errors += 1
                    view.detail = reason.detail
                    if view.breaker.failed(reason.text, at_once=at_once):
                        self.rotation.eject(view, reason)
                    self.rotation.retier(reason)
                    request.handled(view)
                    if not why.startswith(("not-ready", "late")):  # it did not end on it
                        lost_under.append(view.key)
                    if poisoned is not None and not pending:  # the first failed too
                        self.counts["failed"] += 1
                        raise refusals.poison_alone(self.name, size, lost_under, poisoned)
                    if len(lost_under) >= 2 and await others_answer(
                        self.views, tried, request, self.rotation.answers
                    ):
                        for loser in pending:
                            loser.cancel()
                        self.counts["failed"] += 1
                        raise refusals.poison(self.name, size, lost_under, errors)
                if not pending:
                    if used_retries >= retries or not self.retry_budget.take():
                        break
                    used_retries += 1
                    self.counts["retries"] += 1
        finally:
            request.release()
        return await self._no_replica(x, started, used_retries, hedged, errors)

    def _answered(
        self,
        view: ReplicaView,
        reply: dict[str, Any],
        took: float,
        started: float,
        retries: int,
        hedged: bool,
    ) -> Answer:
        view.breaker.succeeded()
        view.served += 1
        view.latencies.add(took)
        self.latencies.add(took)
        self.counts["answered"] += 1
        self.rotation.retier(f"replica {view.key} answered")
        tier = Health.HEALTHY if self.tier is Health.HEALTHY else Health.DEGRADED
        return Answer(reply["y"], view.key, tier, retries, hedged, time.monotonic() - started)

    async def _no_replica(
        self, x: Any, started: float, retries: int, hedged: bool, errors: list[str]
    ) -> Answer:
        why = "; ".join(errors[-3:]) or self.tier_reason
        if self.fallback is None:
            self.counts["failed"] += 1
            raise refusals.unavailable(self.name, why)
        await asyncio.sleep(self.fallback_pace.delay())
        loop = asyncio.get_running_loop()
        value = await loop.run_in_executor(None, self.fallback, x)
        self.counts["fallback"] += 1
        return Answer(value, None, Health.FALLBACK, retries, hedged, time.monotonic() - started)

    def fallback_here(self, x: Any) -> Answer | None:
        """The fallback's answer, computed in the calling thread, while no replica is in
        rotation (tier FALLBACK); None otherwise: route it on the loop.

        With every replica gone there is nothing to route, and the two hops to the
        router's loop and back cost tens of ms on a loaded machine: a notebook's
        LocalCluster restarts its killed workers on that very loop. Safe from any
        thread: it reads two attributes, and counts on the loop."""
        if self.fallback is None or self.tier is not Health.FALLBACK or self.closed:
            return None
        started = time.monotonic()
        time.sleep(self.fallback_pace.delay())  # the restarting workers need the CPU
        value = self.fallback(x)
        self.client.loop.add_callback(self._counted_fallback)
        return Answer(value, None, Health.FALLBACK, 0, False, time.monotonic() - started)

    def _counted_fallback(self) -> None:
        self.counts["requests"] += 1
        self.counts["fallback"] += 1

    def status(self) -> dict[str, Any]:
        return {
            "tier": self.tier.value,
            "reason": self.tier_reason,
            "detail": self.rotation.tier_detail,
            "wanted": self.rotation.wanted,
            "outstanding": self.outstanding,
            "p50_s": self.latencies.quantile(0.5),
            "p99_s": self.latencies.quantile(0.99),
            "replicas": [v.row() for v in sorted(self.views.values(), key=lambda v: v.index)],
            "transitions": list(self.transitions),
            **self.counts,
        }
