"""The process groups of one generation, with waits that a newer plan can interrupt.

Groups are standalone ``ProcessGroupGloo`` / ``ProcessGroupNCCL`` objects over a
``PrefixStore`` of the cluster's rendezvous store, not torch's global default group:
a long-lived worker process then changes groups at will, without
``destroy_process_group`` (which joins the group's threads, and so would block on a
collective that a dead peer never finishes).

Every collective is issued asynchronously and waited on with :func:`wait`, which
returns when the work completes, raises :class:`PeerFailed` when it failed (on gloo
about 10 ms after a peer is SIGKILLed) and :class:`Interrupted` as soon as the rank
actor is woken by a newer plan (a peer that hangs never fails a collective). An
abandoned collective keeps running in its group's own threads until it ends (its
peers stop, or the group's timeout), and dropping the group joins those threads. So a
retired generation's groups go to :data:`GRAVEYARD`, and a reaper thread, never the
training thread, drops them shortly after the collectives left on them have ended
(none were: a run that ended, a peer whose loss failed the collective), at the
latest after the groups' timeout. Every gloo group holds a listener that accepts any
local connection and keeps it until the group goes (issue 36): a retired group must
not outlive its use. At interpreter exit the ones still kept are aborted and dropped
while CUDA is still up: a ProcessGroupNCCL destroyed after the driver shut down
terminates the worker process instead of letting it exit.

While a generation trains, a background thread builds its *survivor groups*: one
for every set of all ranks but one. When a single rank is lost the survivors switch
to the group that leaves it out, with no rendezvous at all.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import gc
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ft_notebook.exceptions import RendezvousTimeout, TrainingError


class Interrupted(Exception):
    """A newer plan arrived while this rank waited."""


class PeerFailed(TrainingError):
    """A collective failed: a peer died or its connection broke."""


#: Groups retired and not yet dropped, with the time by which they will be.
GRAVEYARD: list[tuple[float, Any]] = []
_GRAVEYARD_LOCK = threading.Lock()
#: How often a reaper looks whether the collectives it waits for have ended.
_REAP_POLL_S = 0.1
#: How long a retired group is kept after its collectives have ended. Destroying a
#: gloo group holds the GIL while it joins its threads and closes its pairs: dropped at
#: once, the old generation's groups stalled the survivors' first steps, and a
#: SIGKILL -> first step took 49-65 ms instead of 28-39 ms (3 workers, 10 kills each).
#: Two seconds later the recovery is over, and the listeners still go soon (issue 36).
_DROP_AFTER_S = 2.0


def bury(groups: list[Any], keep_s: float, pending: list[Any]) -> None:
    """Drop ``groups`` on a reaper thread :data:`_DROP_AFTER_S` after the ``pending``
    work on them has ended (after the retire when none is), at the latest after
    ``keep_s``, by which their own timeout has ended it."""
    deadline = time.monotonic() + keep_s
    with _GRAVEYARD_LOCK:
        GRAVEYARD.extend((deadline, g) for g in groups)
    threading.Thread(
        target=_reap,
        args=([id(g) for g in groups], deadline, pending),
        name="ft-notebook-group-reaper",
        daemon=True,
    ).start()


def _reap(ids: list[int], deadline: float, pending: list[Any]) -> None:
    quiet = threading.Event()  # never set: a wait that a poll can end
    while pending and time.monotonic() < deadline:
        if all(_ended(w) for w in pending):
            break
        quiet.wait(_REAP_POLL_S)
    pending.clear()
    quiet.wait(max(0.0, min(_DROP_AFTER_S, deadline - time.monotonic())))
    with _GRAVEYARD_LOCK:
        due = [g for _t, g in GRAVEYARD if id(g) in ids]
        GRAVEYARD[:] = [(t, g) for t, g in GRAVEYARD if id(g) not in ids]
    due.clear()  # dropping a group joins its threads: here, on the reaper's thread


def _ended(work: Any) -> bool:
    try:
        return bool(work.is_completed())
    except Exception:  # a work that cannot say has failed: it is over
        return True


@atexit.register  # Python's exit handlers run before CUDA's own (C) ones
def _release_buried_at_exit() -> None:
    # only NCCL groups: dropping a gloo group joins its threads, which could hold up
    # the exit until an abandoned collective times out
    with _GRAVEYARD_LOCK:
        nccl = [g for _t, g in GRAVEYARD if "NCCL" in type(g).__name__]
        GRAVEYARD[:] = [(t, g) for t, g in GRAVEYARD if "NCCL" not in type(g).__name__]
    abort_nccl(nccl)
    nccl.clear()
    gc.collect()  # a group in a reference cycle is destroyed now, not after CUDA


class Waker:
    """Wakes a rank waiting on a collective, when it completes or a plan arrives."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.interrupted: Callable[[], bool] = lambda: False
        #: Collectives whose waits were interrupted while they ran (until taken).
        self.abandoned: list[Any] = []

    def take_abandoned(self) -> list[Any]:
        """The collectives left running since the last call."""
        abandoned, self.abandoned = self.abandoned, []
        return abandoned

    def wait(self, work: Any, what: str) -> None:
        """Wait for ``work``; raise Interrupted or PeerFailed instead of blocking."""
        fut = work.get_future()
        fut.add_done_callback(lambda _f: self.event.set())
        while True:
            self.event.clear()
            # the future completes (and wakes us) before the work says it is completed:
            # ask both, or a wake-up is lost and the wait sleeps its whole poll
            if fut.done() or work.is_completed():
                break
            if self.interrupted():
                self.abandoned.append(work)
                raise Interrupted(what)
            self.event.wait(0.05)
        try:
            work.wait()
        except Exception as e:  # gloo raises RuntimeError, NCCL DistBackendError
            raise PeerFailed(f"{what} failed: {str(e).splitlines()[0][:300]}") from e

    def wait_all(self, works: list[Any], what: str) -> None:
        """Wait for every one of ``works``, which have no future to wake us (gloo's
        sends and receives): a helper thread waits on them in turn and wakes us."""
        done, failed = threading.Event(), []

        def wait_in_turn() -> None:
            try:
                for work in works:
                    work.wait()
            except BaseException as e:  # handed to the rank below
                failed.append(e)
            finally:
                done.set()
                self.event.set()

        threading.Thread(target=wait_in_turn, name="ft-wait-sends", daemon=True).start()
        while not done.is_set():
            self.event.clear()
            if done.is_set():
                break
            if self.interrupted():  # the helper ends with the group (its timeout, abort)
                self.abandoned.extend(works)
                raise Interrupted(what)
            self.event.wait(0.05)
        if failed:
            raise PeerFailed(f"{what} failed: {str(failed[0]).splitlines()[0][:300]}") from (
                failed[0]
            )


@dataclass(frozen=True)
class GroupTimeouts:
    """How long a group's setup waits for its peers (``rendezvous_s``: also the store
    clients' waits), and how long one of its collectives may (``collective_s``: the
    group's own timeout; a rank slow once must not cost a regroup, and hangs are the
    stall watch's)."""

    rendezvous_s: float
    collective_s: float


def make_group(
    store: Any,
    prefix: str,
    rank: int,
    world: int,
    backend: str,
    timeout_s: float,
    device_index: int | None = None,
) -> Any:
    """A process group of ``world`` ranks meeting under ``prefix`` (blocks until all
    join); ``timeout_s`` is the group's, which bounds each of its collectives.

    NCCL meets its peers only at a group's first collective. With ``device_index``
    (the rank's GPU) one tiny all-reduce is made here, so that a peer that never comes
    fails the rendezvous, within its own timeout, and not the first collective of the
    rank's thread, which would wait the far longer collective timeout."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    prefixed = dist.PrefixStore(prefix, store)  # type: ignore[attr-defined]
    if backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        group = dist.ProcessGroupNCCL(prefixed, rank, world, opts)
        if device_index is not None:
            _connect(group, device_index)
        return group
    return dist.ProcessGroupGloo(prefixed, rank, world, timeout)


def _connect(group: Any, device_index: int) -> None:
    """Make NCCL set up ``group``'s communicator now (on this thread: it blocks until
    every rank has come)."""
    import torch

    torch.cuda.set_device(device_index)  # per thread: a new thread starts on GPU 0
    group.allreduce([torch.zeros(1, device=torch.device("cuda", device_index))]).wait()
    torch.cuda.synchronize(device_index)


def form_interruptibly(waker: Waker, build: Callable[[], Any], what: str, timeout_s: float) -> Any:
    """Run the blocking ``build`` (a rendezvous) in a helper thread, so a newer plan
    (a peer lost while we meet) does not have to wait out the rendezvous timeout."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["group"] = build()
        except BaseException as e:  # reported to the waiting thread
            box["error"] = e
        waker.event.set()

    helper = threading.Thread(target=target, name=f"ft-notebook-{what}", daemon=True)
    helper.start()
    deadline = time.monotonic() + timeout_s + 5.0
    while helper.is_alive():
        waker.event.clear()
        if waker.interrupted():
            raise Interrupted(what)
        if time.monotonic() > deadline:
            raise RendezvousTimeout(f"{what} did not complete within {timeout_s:.0f} s.")
        waker.event.wait(0.05)
    if "error" in box:
        raise RendezvousTimeout(f"{what} failed: {box['error']}") from box["error"]
    return box["group"]


class Generation:
    """This rank's view of one generation: its group, rank, world and survivor groups."""

    def __init__(
        self,
        prefix: str,
        gen: int,
        members: tuple[str, ...],
        name: str,
        group: Any,
        backend: str,
        stores: list[Any] | None = None,
    ) -> None:
        self.prefix, self.gen, self.members, self.name = prefix, gen, members, name
        #: Stores our groups were made on: a store written in Python must outlive
        #: them (torch keeps only its C++ half; calls then fail "Not implemented").
        self.stores: list[Any] = list(stores or [])
        self.rank = members.index(name)
        self.world = len(members)
        self.group = group
        self.backend = backend
        self.survivors: dict[str, Any] = {}  # lost name -> group of the others
        self.prepared = threading.Event()
        self.prepare_error: BaseException | None = None

    def prepare_survivors(self, store: Any, timeout_s: float, on_done: Callable[[], None]) -> None:
        """Build every leave-one-out group this rank belongs to, in a daemon thread.

        Every rank builds them in the same order (by the lost rank), so the members
        of each group meet in it whatever order they reach it in.
        """

        self.stores.append(store)

        def build() -> None:
            try:
                for lost in self.members:
                    if lost == self.name:
                        continue
                    others = [m for m in self.members if m != lost]
                    prefix = f"{self.prefix}without-{lost}/"
                    self.survivors[lost] = make_group(
                        store,
                        prefix,
                        others.index(self.name),
                        len(others),
                        self.backend,
                        timeout_s,
                    )
                self.prepared.set()
                on_done()
            except BaseException as e:  # a peer died meanwhile: the slow path remains
                self.prepare_error = e

        threading.Thread(target=build, name="ft-notebook-prepare-groups", daemon=True).start()

    def survivor_group(self, lost: str) -> Any | None:
        if not self.prepared.is_set():
            return None
        return self.survivors.get(lost)

    def groups(self) -> list[Any]:
        """This generation's group and the survivor groups prepared so far."""
        return [g for g in (self.group, *self.survivors.values()) if g is not None]

    def retire(self, timeout_s: float, pending: list[Any]) -> None:
        """Let this generation's groups go: once the ``pending`` collectives on them
        (waits left by an interrupt) have ended, at once if none, and at the latest
        after ``timeout_s``, the groups' own timeout."""
        groups = self.groups()
        self.survivors = {}
        self.group = None
        if self.backend == "nccl":
            # a pending NCCL kernel spins on the GPU until its communicator is aborted
            # (aborting is NCCL's error handling that ends the communicator, not the
            # process); not on the training thread, as it may take a moment
            threading.Thread(target=_abort_all, args=(groups,), daemon=True).start()
        bury(groups, timeout_s + 5.0, pending)


def abort_nccl(groups: list[Any]) -> None:
    """Abort NCCL communicators now, on this thread (at exit: while CUDA is up)."""
    _abort_all([g for g in groups if "NCCL" in type(g).__name__])


def _abort_all(groups: list[Any]) -> None:
    for group in groups:
        abort = getattr(group, "abort", None) or getattr(group, "_abort", None)
        if abort is not None:
            with contextlib.suppress(Exception):  # already aborted: nothing more to free
                abort()
