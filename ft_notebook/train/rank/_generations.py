"""How one rank gets into each generation its plans name.

:class:`RankGenerations` owns the forming of the rank's generations: a rendezvous on the
cluster's store (:class:`~._store.ClusterStore`, in the scheduler) under the plan's
prefix (interruptible by a newer plan), or a switch to the group the previous
generation prepared without the one lost rank; the retiring of the generation it
leaves; and the survivor groups built in the background while a generation trains.
The generation the rank is in is
``collectives.gen`` (:class:`~._collectives.Collectives`); only this object changes
it while the rank runs.

Each rank marks its arrival in the store before it forms a group; a rendezvous that
fails says which members' marks the rank did not find (:class:`NotMet`), so the coordinator
can tell a member that never came from peers that could not reach each other
(:mod:`ft_notebook.train.coordinator._evictions`). :mod:`._partition` is the drill of such a member.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ft_notebook.exceptions import RendezvousTimeout
from ft_notebook.train.protocol import How, Phase
from ft_notebook.train.rank._groups import (
    Generation,
    GroupTimeouts,
    PeerFailed,
    Waker,
    form_interruptibly,
    make_group,
)
from ft_notebook.train.rank._partition import isolated
from ft_notebook.train.report_kinds import PreparedData

if TYPE_CHECKING:
    from ft_notebook.train.protocol import Plan
    from ft_notebook.train.rank._collectives import Collectives
    from ft_notebook.train.rank._report import RankReporter


class NotMet(RendezvousTimeout):
    """A rendezvous failed; ``absent``: the members whose arrival marks this rank did
    not find (None: it could not look)."""

    def __init__(self, message: str, absent: tuple[str, ...] | None) -> None:
        super().__init__(message)
        self.absent = absent


def arrival_key(prefix: str, name: str) -> str:
    return f"{prefix}arrived/{name}"


class RankGenerations:
    def __init__(
        self,
        collectives: Collectives,
        waker: Waker,
        name: str,
        backend: str,
        timeouts: GroupTimeouts,
        reporter: RankReporter,
    ) -> None:
        self.collectives, self.waker, self.name = collectives, waker, name
        self.backend, self.timeouts, self.reporter = backend, timeouts, reporter

    def establish(self, plan: Plan) -> Generation:
        """Make ``plan``'s generation the rank's; raises Interrupted, PeerFailed or
        RendezvousTimeout (then the rank is in none)."""
        gen = self.collectives.gen = self._make(plan)
        return gen

    def _make(self, plan: Plan) -> Generation:
        old, log = self.collectives.gen, self.reporter.log
        timeout_s = self.timeouts.collective_s  # what a group left behind may still run
        rank, world = plan.members.index(self.name), len(plan.members)
        if plan.how is How.SURVIVE and old is not None and old.gen == plan.base and plan.lost:
            group = old.survivor_group(plan.lost)
            if group is not None:
                log(f"generation {plan.gen}: switched to the prepared group without {plan.lost}")
                old.survivors.pop(plan.lost, None)
                old.retire(timeout_s, self.waker.take_abandoned())
                return Generation(
                    plan.prefix, plan.gen, plan.members, self.name, group, self.backend, old.stores
                )
            raise PeerFailed(f"no prepared group of generation {plan.base} without {plan.lost}")
        if old is not None:
            old.retire(timeout_s, self.waker.take_abandoned())
            self.collectives.gen = None
        self.reporter.set_phase(Phase.RENDEZVOUS)
        store = self.store(plan.store)
        prefix, backend = plan.prefix, self.backend
        if isolated():  # the drill (%ft chaos isolate): where no peer ever comes
            prefix = f"{prefix}isolated-{self.name}/"

        device_index = _cuda_device() if backend == "nccl" else None  # this thread's GPU

        def meet() -> Any:
            store.set(arrival_key(prefix, self.name), "1")  # who came shows if this fails
            return make_group(store, prefix, rank, world, backend, timeout_s, device_index)

        try:
            group = form_interruptibly(
                self.waker, meet, f"rendezvous of generation {plan.gen}", self.timeouts.rendezvous_s
            )
        except RendezvousTimeout as e:
            raise NotMet(str(e), self._absent(plan)) from e
        log(f"generation {plan.gen}: rank {rank} of {world}")
        return Generation(
            plan.prefix, plan.gen, plan.members, self.name, group, self.backend, [store]
        )

    def _absent(self, plan: Plan) -> tuple[str, ...] | None:
        """The members whose arrival marks are not in the store under ``plan``'s prefix
        (a fresh client: the rendezvous' own may still be waiting in its thread)."""
        try:
            store = self.store(plan.store, timeout_s=min(5.0, self.timeouts.rendezvous_s))
            return tuple(m for m in plan.members if not store.check([arrival_key(plan.prefix, m)]))
        except Exception:  # the store itself is out of reach: nothing to tell
            return None

    def prepare_survivors(self, plan: Plan, gen: Generation) -> None:
        """Build ``gen``'s leave-one-out groups in the background; "prepared" is
        reported for this generation, even when the build ends after it."""
        gen_no = gen.gen

        def report() -> None:
            self.reporter.report(PreparedData(prepared_gen=gen_no))

        gen.prepare_survivors(self.store(plan.store), self.timeouts.collective_s, report)

    def store(self, address: tuple[str, int], timeout_s: float | None = None) -> Any:
        """A new client of the rendezvous store. One per rendezvous and per survivor
        build: a waiting client must not hold up the next. ``address`` is the plan's
        (the scheduler's host, port 0): the store is reached through this worker's own
        connection to the scheduler, wherever that is."""
        from ft_notebook.train.rank._store import ClusterStore

        return ClusterStore(self.reporter.worker, timeout_s or self.timeouts.rendezvous_s)

    def leave(self) -> None:
        """The rank stops: retire the generation it is in."""
        if self.collectives.gen is not None:
            self.collectives.gen.retire(self.timeouts.collective_s, self.waker.take_abandoned())
        self.collectives.gen = None


def _cuda_device() -> int:
    import torch

    return int(torch.cuda.current_device())
