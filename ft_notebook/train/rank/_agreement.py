"""The members of a generation agree on one state, and check that it can be trusted.

:class:`StateAgreement` owns the steps that follow every change of group: the ranks
agree on the newest committed step (MAX over ranks); the lowest rank that holds it
sends its state (:meth:`StateAgreement.send_state`); if no member holds one, they
read the newest durable checkpoint; before the first step, the state most ranks
built from the factories wins (:meth:`StateAgreement.initial_sender`). Then
:meth:`StateAgreement.verify` checks that they hold one state one of them can vouch
for (:mod:`._verify`), and a repair is reported. Every rank runs the same steps, so
every rank issues the same collectives in the same order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ft_notebook.train.protocol import Phase
from ft_notebook.train.rank._verify import Verdict, initial_source
from ft_notebook.train.report_kinds import StateRepairedData

if TYPE_CHECKING:
    from ft_notebook.train.rank._checkpoints import RankCheckpoints
    from ft_notebook.train.rank._collectives import Collectives
    from ft_notebook.train.rank._held_state import HeldState
    from ft_notebook.train.rank._report import RankReporter


class StateAgreement:
    def __init__(
        self,
        collectives: Collectives,
        held: HeldState,
        checkpoints: RankCheckpoints,
        reporter: RankReporter,
    ) -> None:
        self.collectives, self.held = collectives, held
        self.checkpoints, self.reporter = checkpoints, reporter

    def sync(self, committed: int) -> None:
        """Agree on the newest committed step; whoever lacks it gets it from a peer.
        ``committed``: the newest step the coordinator knows committed, read from the
        store when no member holds it."""
        import torch

        gen, held, reduce = self.collectives.current(), self.held, self.collectives.allreduce
        self.reporter.set_phase(Phase.SYNC)
        device = held.trainer.device
        steps = torch.tensor([held.step, -held.step], dtype=torch.int64, device=device)
        reduce(steps, "MAX", "agreeing on the committed step")
        newest, oldest = int(steps[0]), -int(steps[1])
        if newest < 0 and committed > 0:
            # every rank that held the state was lost: the newest durable checkpoint
            self.reporter.log(f"no member holds the state of step {committed}: reading the store")
            self.checkpoints.resume()
            steps = torch.tensor([held.step, -held.step], dtype=torch.int64, device=device)
            reduce(steps, "MAX", "agreeing on the checkpoint step")
            newest, oldest = int(steps[0]), -int(steps[1])
        if newest == oldest and newest >= 0:
            return
        if newest < 0:  # nobody has trained yet: the state most ranks built
            sender = self.initial_sender()
        else:
            src = torch.tensor([gen.rank if held.step == newest else gen.world], device=device)
            reduce(src, "MIN", "choosing the state's sender")
            sender = int(src[0])
        self.send_state(sender, holds_it=newest >= 0 and held.step == newest)
        held.step = max(newest, 0)
        self.reporter.log(f"state of step {held.step} from rank {sender}")

    def initial_sender(self) -> int:
        """The rank whose factory-built state the run starts from (see
        :func:`~ft_notebook.train.rank._verify.initial_source`); ranks that built another
        are reported, as a repaired state."""
        gen = self.collectives.current()
        if gen.world == 1:
            return 0
        sender, others = initial_source(
            gen.rank, gen.world, self.held.trainer, self.collectives.allreduce
        )
        if others and gen.rank == sender:
            names = [gen.members[r] for r in others]
            self.reporter.log(
                f"{names} built another initial state from the factories than "
                f"{gen.world - len(others)} of {gen.world} ranks did (a factory that is not "
                f"deterministic given the seed, or another thread of the worker drawing "
                f"from torch's generator meanwhile): every rank starts from this one's"
            )
            self.reporter.report(
                StateRepairedData(
                    workers=tuple(names),
                    source=gen.name,
                    at_step=0,
                    when="building the initial state",
                )
            )
        return sender

    def send_state(self, sender: int, *, holds_it: bool = False) -> None:
        """Every member takes rank ``sender``'s state (``torch.save`` bytes).
        ``holds_it``: this rank holds that state already (it committed the same step),
        so it takes part in the broadcast and loads nothing: beside a joiner that takes
        a 67 M-parameter state, the survivors' loads only took the cores it needs."""
        import torch

        gen, held, broadcast = self.collectives.current(), self.held, self.collectives.broadcast
        device = held.trainer.device
        sending = gen.rank == sender
        # the bytes go out as they were written and come in once: each copy of an
        # 800 MB state costs about a second on a loaded core
        payload = held.to_buffer() if sending else None
        # on the device: NCCL broadcasts only there, and the receivers read it back
        size = torch.tensor([0 if payload is None else len(payload)], device=device)
        broadcast(size, sender, "sending the state's size")
        if payload is not None and device.type == "cpu":
            data = torch.frombuffer(payload, dtype=torch.uint8)
        else:
            data = torch.empty(int(size[0]), dtype=torch.uint8, device=device)
            if payload is not None:
                data.copy_(torch.frombuffer(payload, dtype=torch.uint8))
        broadcast(data, sender, "sending the state")
        # what the sender vouches for, so that an exact copy is vouched for too: the
        # members that took it may outlive the sender before the group checks them
        claim = held.check.claim(held.step, held.trainer, sending)
        broadcast(claim, sender, "sending what the sender vouches for")
        if not sending and not holds_it:
            held.load_bytes(data.cpu().numpy())
            held.check.received(held.trainer, claim)

    def verify(self, when: str) -> Verdict:
        """The members hold one state that one of them can vouch for (see
        :mod:`._verify`); a repair is reported, a failure raises StateUnverified."""
        gen, held = self.collectives.current(), self.held
        self.reporter.set_phase(Phase.VERIFY)
        verdict = held.check.check(
            held.step,
            gen.rank,
            gen.world,
            held.trainer,
            self.collectives.allreduce,
            self.collectives.broadcast,
            self.send_state,
            when,
        )
        if verdict.repaired and gen.rank == verdict.source:
            names = [gen.members[r] for r in verdict.repaired]
            self.reporter.log(f"after {when}: {names} held another state; they took this one's")
            self.reporter.report(
                StateRepairedData(
                    workers=tuple(names), source=gen.name, at_step=held.step, when=when
                )
            )
        return verdict
