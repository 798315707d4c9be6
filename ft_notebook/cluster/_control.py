"""The generic control plane: a SchedulerPlugin for membership, hangs and rendezvous.

:class:`ControlPlane` lives in the scheduler process, which outlives any worker and
the notebook kernel. It

- tracks membership by the workers' stable names (a restarted worker comes back with
  a new address and pid under the same name: one :class:`~._members.Member`) and
  publishes ``worker-joined`` and ``worker-lost`` on
  :func:`~ft_notebook.events.cluster_topic`;
- watches heartbeat ages: a worker silent for ``hung-after`` (never less than three
  of the scheduler's heartbeat intervals) is published ``worker-hung`` and evicted
  by a SIGKILL of its process sent through its nanny, which starts a fresh one. A
  worker busy in a long task still heartbeats (heartbeats come from its event loop,
  not from the thread running the task), so it is not evicted. A stall of the
  scheduler's own event loop is not taken for a hang of every worker;
- keeps *holds*: named uses of the cluster (a training run, a service) that keep a
  detached cluster from shutting down while idle;
- hosts a rendezvous store (:class:`~._rendezvous.RendezvousStore`): bounded keys
  in the scheduler, served by the handler ``ft_rendezvous`` over the cluster's own
  (TLS) connections, so no port is opened that another user could reach. It carries
  small values between workers (addresses, step numbers, flags); they are bytes that
  consumers must never unpickle or execute.

Other plugins find it with :func:`control_plane` and follow membership with
:meth:`ControlPlane.add_listener`; nothing here knows about training or serving.
Hooks never raise into the scheduler: failures are logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from distributed.comm.addressing import get_address_host
from distributed.core import Status
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.protocol.pickle import dumps
from distributed.scheduler import heartbeat_interval

from ft_notebook.cluster._health import HEALTH_METRIC
from ft_notebook.cluster._members import Member, MemberState, address_host, status_row
from ft_notebook.cluster._rendezvous import HANDLER, RendezvousStore
from ft_notebook.events import (
    EventPayload,
    WorkerHung,
    WorkerJoined,
    WorkerLost,
    cluster_topic,
    publish,
)
from ft_notebook.exceptions import ClusterError

logger = logging.getLogger(__name__)

PLUGIN_NAME = "ft-notebook-control"
#: Lost workers remembered for the status table (oldest forgotten first).
_MAX_LOST = 256


#: Called as listener(kind, name, address, cause) with kind "joined", "lost" or "hung".
Listener = Callable[[str, str, str, str], None]


class ControlPlane(SchedulerPlugin):
    """Membership, heartbeat watchdog, holds and rendezvous store of one scheduler."""

    name = PLUGIN_NAME
    idempotent = True  # installing it again on connect keeps the running instance

    def __init__(
        self,
        hung_after_s: float | None = None,
        *,
        check_every_s: float | None = None,
        evict_hung: bool = True,
    ) -> None:
        self.hung_after_s = hung_after_s
        self.check_every_s = check_every_s
        self.evict_hung = evict_hung
        self._clear()

    def _clear(self) -> None:
        self.scheduler: Any = None
        #: Set by whoever shuts the cluster down: workers leaving then are no fault.
        self.closing = False
        self.members: dict[str, Member] = {}
        self.holds: dict[str, float] = {}
        self._names: dict[str, str] = {}  # address -> stable name
        self._evicting: dict[str, tuple[float, str]] = {}  # address -> (since, cause)
        self._grace_until = 0.0
        self._last_tick: float | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self.rendezvous: RendezvousStore | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.listeners: list[Listener] = []

    def __getstate__(self) -> dict[str, Any]:  # travels to a scheduler before start()
        return {
            "hung_after_s": self.hung_after_s,
            "check_every_s": self.check_every_s,
            "evict_hung": self.evict_hung,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._clear()

    # ---- lifecycle

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        if self.hung_after_s is None:
            from ft_notebook.config import get_config

            self.hung_after_s = get_config().cluster.hung_after_s
        if self.check_every_s is None:
            self.check_every_s = min(0.25, self.hung_after_s / 4)
        for ws in list(scheduler.workers.values()):
            self._track(ws)
        self.rendezvous = RendezvousStore()
        scheduler.handlers[HANDLER] = self.rendezvous.handle
        self._watchdog = asyncio.ensure_future(self._watch())

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        for task in list(self._tasks):
            task.cancel()
        if self.rendezvous is not None:
            self.rendezvous.close()
            handlers = getattr(self.scheduler, "handlers", {})
            if handlers.get(HANDLER) == self.rendezvous.handle:  # not a successor's
                del handlers[HANDLER]

    # ---- membership

    def add_worker(self, scheduler: Any, worker: str) -> None:
        ws = scheduler.workers.get(worker)
        if ws is None:
            return
        member = self._track(ws)
        self._publish(
            WorkerJoined(name=member.name, address=worker, pid=member.pid, gpu=member.gpu),
            member.name,
        )
        self._tell("joined", member.name, worker, "")

    def remove_worker(self, scheduler: Any, worker: str, *, stimulus_id: str, **kw: Any) -> None:
        name = self._names.pop(worker, None)
        if name is None or self.closing:
            return
        evicted = self._evicting.pop(worker, None)
        cause = evicted[1] if evicted else "process gone or connection closed"
        logger.info("worker %s (%s) removed: %s (%s)", name, worker, cause, stimulus_id)
        member = self.members.get(name)
        if member is not None and member.address == worker:
            member.state, member.cause, member.lost_at = MemberState.LOST, cause, time.time()
            self._forget_old_lost()
        self._publish(WorkerLost(name=name, address=worker, cause=cause), name)
        self._tell("lost", name, worker, cause)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` on every join, loss and hang (on the scheduler's loop)."""
        if listener not in self.listeners:
            self.listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)

    def _tell(self, kind: str, name: str, address: str, cause: str) -> None:
        for listener in list(self.listeners):
            try:
                listener(kind, name, address, cause)
            except Exception:
                logger.exception("a membership listener failed on %s of %s", kind, name)

    def _track(self, ws: Any) -> Member:
        name = str(ws.name)
        health = (ws.metrics or {}).get(HEALTH_METRIC) or {}
        previous = self.members.get(name)
        member = Member(
            name=name,
            address=ws.address,
            host=address_host(ws.address),
            pid=ws.pid or health.get("pid"),
            nanny=ws.nanny,
            gpu=health.get("gpu_id"),
            joined=time.time(),
            restarts=previous.restarts + 1 if previous is not None else 0,
        )
        self.members[name] = member
        self._names[ws.address] = name
        return member

    def _forget_old_lost(self) -> None:
        lost = [m for m in self.members.values() if m.state is MemberState.LOST]
        for m in sorted(lost, key=lambda m: m.lost_at or 0)[: max(0, len(lost) - _MAX_LOST)]:
            del self.members[m.name]

    def _publish(self, payload: EventPayload, worker: str) -> None:
        try:
            publish(payload, cluster_topic(), worker=worker, via=self.scheduler)
        except Exception:
            logger.exception("could not publish %s for worker %s", payload.kind, worker)

    # ---- heartbeat watchdog

    def threshold(self) -> float:
        """Heartbeat age after which a worker counts as hung."""
        n = len(self.scheduler.workers) if self.scheduler is not None else 0
        return max(float(self.hung_after_s or 0), 3 * heartbeat_interval(n))

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.check_every_s or 0.25)
            try:
                self.check_heartbeats()
            except Exception:
                logger.exception("the heartbeat watchdog failed; it goes on")

    def check_heartbeats(self, now: float | None = None) -> list[str]:
        """Mark workers silent for too long as hung and evict them; return their names."""
        now = time.time() if now is None else now
        tick = time.monotonic()
        threshold = self.threshold()
        if self._last_tick is not None and tick - self._last_tick > threshold / 2:
            # Our own event loop stalled: heartbeats that came meanwhile are still
            # unread, so ages say nothing yet. Give them a full threshold to arrive.
            self._grace_until = now + threshold
        self._last_tick = tick
        if now < self._grace_until:
            return []
        hung = []
        for address, ws in list(self.scheduler.workers.items()):
            age = now - ws.last_seen
            if address in self._evicting:
                since, _ = self._evicting[address]
                if now - since > 3 * threshold:  # the eviction did not take: try again
                    del self._evicting[address]
                continue
            if age < threshold or ws.status not in (Status.running, Status.paused):
                continue
            name = self._names.get(address, str(ws.name))
            cause = f"evicted: no heartbeat for {age:.1f} s (threshold {threshold:.1f} s)"
            self._evicting[address] = (now, cause)
            member = self.members.get(name)
            if member is not None and member.address == address:
                member.state, member.cause = MemberState.HUNG, cause
            self._publish(
                WorkerHung(name=name, address=address, heartbeat_age_s=round(age, 3)), name
            )
            hung.append(name)
            self._tell("hung", name, address, cause)
            if self.evict_hung:
                self._spawn(self.evict(address))
        return hung

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                logger.error("control-plane task failed", exc_info=t.exception())

        task.add_done_callback(done)

    async def evict(self, address: str) -> str:
        """SIGKILL a worker's process (through its nanny, which restarts it).

        Returns how: ``"nanny"``, ``"local-kill"`` (no nanny, same host) or
        ``"removed"`` (no nanny elsewhere: the scheduler forgets it).
        """
        ws = self.scheduler.workers.get(address)
        if ws is None:
            return "gone"
        self._evicting.setdefault(address, (time.time(), "evicted"))
        if ws.nanny:
            result = await self.scheduler.broadcast(
                msg={
                    "op": "run",
                    "function": dumps(signal_worker_process),
                    "args": dumps((int(signal.SIGKILL),)),
                    "kwargs": dumps({}),
                },
                workers=[address],
                nanny=True,
                on_error="return",
            )
            outcome = result.get(address)
            if isinstance(outcome, dict) and outcome.get("status") == "OK":
                logger.warning("evicted hung worker %s (%s) through its nanny", ws.name, address)
                return "nanny"
            logger.warning("the nanny of %s could not evict it: %r", address, outcome)
        if ws.pid and address_host(address) == address_host(self.scheduler.address):
            with contextlib.suppress(ProcessLookupError):
                os.kill(ws.pid, signal.SIGKILL)
            return "local-kill"
        await self.scheduler.remove_worker(
            address, stimulus_id=f"ft-notebook-evict-{time.time()}", close=True
        )
        return "removed"

    # ---- holds

    def hold(self, key: str) -> None:
        """Mark the cluster in use by ``key`` (a run, a service) until :meth:`release`."""
        self.holds[key] = time.time()

    def release(self, key: str) -> None:
        self.holds.pop(key, None)

    def busy_reasons(self) -> list[str]:
        """Why the cluster is in use now; empty when it is idle."""
        s = self.scheduler
        reasons = [f"hold {k!r}" for k in sorted(self.holds)]
        clients = [c for c in s.clients if c != "fire-and-forget"]
        if clients:
            reasons.append(f"{len(clients)} client(s)")
        processing = sum(len(ws.processing) for ws in s.workers.values())
        if processing or s.queued or s.unrunnable:
            reasons.append(f"{processing + len(s.queued) + len(s.unrunnable)} task(s)")
        return reasons

    # ---- rendezvous

    async def rendezvous_store(self) -> tuple[str, int]:
        """Where the ranks meet: ``(scheduler host, 0)``. Port 0 says the store opens
        no port of its own: ranks reach it through their worker's connection to the
        scheduler (:class:`ft_notebook.train.rank._store.ClusterStore`)."""
        return get_address_host(self.scheduler.address), 0

    async def forget_rendezvous(self, prefix: str) -> int:
        """Delete the rendezvous keys under ``prefix``: the store would otherwise keep
        every retired group's keys for as long as the cluster lives."""
        return 0 if self.rendezvous is None else self.rendezvous.forget(prefix)

    # ---- status

    def rows(self) -> list[dict[str, Any]]:
        """One row per worker name, live or lost, for status tables."""
        now = time.time()
        out = []
        for _name, m in sorted(self.members.items()):
            ws = self.scheduler.workers.get(m.address) if m.state is not MemberState.LOST else None
            out.append(status_row(m, ws, now))
        return out


def signal_worker_process(sig: int, dask_worker: Any = None) -> int:
    """Run on a nanny (``dask_worker`` is the nanny): signal its worker process."""
    pid = getattr(dask_worker, "pid", None)
    if not pid:
        raise ClusterError(
            f"The nanny at {getattr(dask_worker, 'address', '?')} has no worker process "
            f"to signal (it may be restarting). Try again in a few seconds."
        )
    try:
        os.kill(int(pid), sig)
    except ProcessLookupError:  # dead, and its nanny has not noticed yet
        raise ClusterError(
            f"The worker process {pid} of the nanny at {getattr(dask_worker, 'address', '?')} "
            f"has exited already (killed or crashed; its nanny restarts it). List the "
            f"workers again in a few seconds and retry."
        ) from None
    return int(pid)


def control_plane(scheduler: Any) -> ControlPlane:
    """The ControlPlane of ``scheduler`` (for other scheduler plugins)."""
    plugin = scheduler.plugins.get(PLUGIN_NAME)
    if not isinstance(plugin, ControlPlane):
        raise ClusterError(
            f"The scheduler at {scheduler.address} has no ft_notebook control plane. "
            f"Connect through ft_notebook.cluster.attach(...) to install it."
        )
    return plugin
