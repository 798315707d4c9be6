"""A rank's state: agreeing on it with the other ranks, saving it, going back to it.

A mixin of :class:`~ft_notebook.train._rank.RankActor`. After any change of group
the ranks agree on the newest committed step (MAX); the lowest rank that holds it
sends its state (``torch.save`` bytes, loaded with ``weights_only=True``); if no
member holds one, they read the newest durable checkpoint. Then they check that
they hold one state that one of them can vouch for (:mod:`._verify`). Durable
checkpoints go out asynchronously; too many non-finite steps in a row roll the run
back to one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ft_notebook.train._earlier import check_order
from ft_notebook.train._groups import PeerFailed
from ft_notebook.train._verify import StateCheck, Verdict, initial_source

if TYPE_CHECKING:
    from ft_notebook.train._groups import Generation, Waker
    from ft_notebook.train._protocol import Plan

#: A checkpoint that holds up training longer than this says so in the rank's log.
_STALL_WORTH_LOGGING_S = 0.05


class RankState:
    """Collectives, state agreement and checkpoints of one rank."""

    run_name: str
    gen: Generation | None
    current: Plan | None
    waker: Waker
    step: int
    skip: set[int]
    nonfinite_total: int
    trainer: Any
    durable: Any
    spec: Any
    check: StateCheck
    worker_name: str

    if TYPE_CHECKING:  # provided by the rank actor

        def log(self, message: str) -> None: ...
        def report(self, kind: str, **data: Any) -> None: ...
        def set_phase(self, phase: str) -> None: ...

    # -- collectives

    def _allreduce(self, tensor: Any, op: str, what: str) -> None:
        import torch.distributed as dist

        assert self.gen is not None
        opts = dist.AllreduceOptions()
        opts.reduceOp = getattr(dist.ReduceOp, op)
        try:
            work = self.gen.group.allreduce([tensor], opts)
        except Exception as e:  # e.g. NCCL connecting lazily to a dead peer
            raise PeerFailed(f"{what} could not start: {e}") from e
        self.waker.wait(work, what)

    def _broadcast(self, tensor: Any, src: int, what: str) -> None:
        import torch.distributed as dist

        assert self.gen is not None
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = src, 0
        try:
            work = self.gen.group.broadcast([tensor], opts)
        except Exception as e:
            raise PeerFailed(f"{what} could not start: {e}") from e
        self.waker.wait(work, what)

    def _sync(self) -> None:
        """Agree on the newest committed step; whoever lacks it gets it from a peer."""
        import torch

        assert self.gen is not None
        self.set_phase("sync")
        device = self.trainer.device
        steps = torch.tensor([self.step, -self.step], dtype=torch.int64, device=device)
        self._allreduce(steps, "MAX", "agreeing on the committed step")
        newest, oldest = int(steps[0]), -int(steps[1])
        plan = self.current
        if newest < 0 and plan is not None and plan.committed > 0:
            # every rank that held the state was lost: the newest durable checkpoint
            self.log(f"no member holds the state of step {plan.committed}: reading the store")
            self._resume()
            steps = torch.tensor([self.step, -self.step], dtype=torch.int64, device=device)
            self._allreduce(steps, "MAX", "agreeing on the checkpoint step")
            newest, oldest = int(steps[0]), -int(steps[1])
        if newest == oldest and newest >= 0:
            return
        if newest < 0:  # nobody has trained yet: the state most ranks built
            sender = self._initial_sender()
        else:
            src = torch.tensor(
                [self.gen.rank if self.step == newest else self.gen.world], device=device
            )
            self._allreduce(src, "MIN", "choosing the state's sender")
            sender = int(src[0])
        self._send_state(sender)
        self.step = max(newest, 0)
        self.log(f"state of step {self.step} from rank {sender}")

    def _initial_sender(self) -> int:
        """The rank whose factory-built state the run starts from (see
        :func:`~ft_notebook.train._verify.initial_source`); ranks that built another
        are reported, as a repaired state."""
        assert self.gen is not None
        gen = self.gen
        if gen.world == 1:
            return 0
        sender, others = initial_source(gen.rank, gen.world, self.trainer, self._allreduce)
        if others and gen.rank == sender:
            names = [gen.members[r] for r in others]
            self.log(
                f"{names} built another initial state from the factories than "
                f"{gen.world - len(others)} of {gen.world} ranks did (a factory that is not "
                f"deterministic given the seed, or another thread of the worker drawing "
                f"from torch's generator meanwhile): every rank starts from this one's"
            )
            self.report(
                "state-repaired",
                workers=names,
                source=self.worker_name,
                at_step=0,
                when="building the initial state",
            )
        return sender

    def _send_state(self, sender: int) -> None:
        """Every member takes rank ``sender``'s state (``torch.save`` bytes)."""
        import torch

        assert self.gen is not None
        device = self.trainer.device
        sending = self.gen.rank == sender
        payload = self._state_bytes() if sending else b""
        size = torch.tensor([len(payload)], dtype=torch.int64, device=device)
        self._broadcast(size, sender, "sending the state's size")
        data = torch.empty(int(size[0]), dtype=torch.uint8, device=device)
        if sending:
            data.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
        self._broadcast(data, sender, "sending the state")
        # what the sender vouches for, so that an exact copy is vouched for too: the
        # members that took it may outlive the sender before the group checks them
        claim = self.check.claim(self.step, self.trainer, sending)
        self._broadcast(claim, sender, "sending what the sender vouches for")
        if not sending:
            self._load_state_bytes(data.cpu().numpy().tobytes())
            self.check.received(self.trainer, claim)

    def _verify(self, when: str) -> Verdict:
        """The members hold one state that one of them can vouch for (see
        :mod:`._verify`); a repair is reported, a failure raises StateUnverified."""
        assert self.gen is not None
        self.set_phase("verify")
        verdict = self.check.check(
            self.step,
            self.gen.rank,
            self.gen.world,
            self.trainer,
            self._allreduce,
            self._broadcast,
            self._send_state,
            when,
        )
        if verdict.repaired and self.gen.rank == verdict.source:
            names = [self.gen.members[r] for r in verdict.repaired]
            self.log(f"after {when}: {names} held another state; they took this one's")
            self.report(
                "state-repaired",
                workers=names,
                source=self.worker_name,
                at_step=self.step,
                when=when,
            )
        return verdict

    def _state_bytes(self) -> bytes:
        import io

        import torch

        buf = io.BytesIO()
        state = self.trainer.state()
        state["ft"] = {"skip": sorted(self.skip), "nonfinite_total": self.nonfinite_total}
        torch.save(state, buf)
        return buf.getvalue()

    def _load_state_bytes(self, data: bytes) -> None:
        import io

        import torch

        # weights_only: a peer's bytes hold tensors and plain values, never code
        state = torch.load(io.BytesIO(data), map_location=self.trainer.device, weights_only=True)
        self.trainer.load_state(state)
        ft = state.get("ft", {})
        self.skip = set(ft.get("skip", []))
        self.nonfinite_total = int(ft.get("nonfinite_total", 0))

    # -- checkpoints

    def _metadata(self) -> dict[str, Any]:
        cursor = self.trainer.cursor(self.step)
        return {
            "epoch": cursor.epoch,
            "position": cursor.position,
            "seed": self.spec.seed,
            # what the cursor depends on: a resume with others would skip or repeat samples
            "batch_size": self.spec.batch_size,
            "samples": self.trainer.size,
            "skip": sorted(self.skip),
            "nonfinite_total": self.nonfinite_total,
        }

    def _checkpoint(self) -> None:
        """An asynchronous durable checkpoint; a failing store only delays the next."""
        # a commit is reported as it happens (DurableCheckpoints.on_commit), not here
        _, error = self.durable.save(self.step, self.trainer.state, self._metadata())
        if self.durable.last_stall_s > _STALL_WORTH_LOGGING_S:  # e.g. pinned buffers allocated
            self.log(
                f"checkpoint at step {self.step}: training paused "
                f"{self.durable.last_stall_s:.3f} s to copy the state"
            )
        if error is not None:
            retry = self.durable.retry_at
            self.log(f"checkpoint at step {self.step} failed ({error}); next try at step {retry}")
            self.report("checkpoint-failed", error=str(error)[:500], retry_at=retry)

    def _resume(self) -> None:
        ckpt = self.durable.newest()
        if ckpt is None:
            self.log("resume: no checkpoint yet; starting from scratch")
            return
        # a resume=True start may meet a checkpoint of other data settings (the kernel
        # checks too, where it can reach the store)
        spec = self.spec
        check_order(
            self.run_name, ckpt.step, ckpt.metadata, spec.seed, spec.batch_size, self.trainer.size
        )
        self.trainer.load_state(ckpt.state)
        self.step = ckpt.step
        self.check.committed(self.step, self.trainer)  # the store verified its hashes
        self.skip = set(ckpt.metadata.get("skip", []))
        self.nonfinite_total = int(ckpt.metadata.get("nonfinite_total", 0))
        self.log(f"resumed from the checkpoint of step {ckpt.step}")

    def _rollback(self, streak: int) -> None:
        """Too many non-finite steps in a row: back to the newest durable checkpoint
        (or the initial state), keeping the offending steps marked to be skipped."""
        skip = set(self.skip)
        ckpt = self.durable.newest()
        if ckpt is not None:
            self.trainer.load_state(ckpt.state)
        else:
            from ft_notebook.train._trainer import Trainer

            self.trainer = Trainer(self.spec, self.trainer.device)
        self.skip = skip
        came_from, self.step = self.step, ckpt.step if ckpt is not None else 0
        self.check.committed(self.step, self.trainer)  # verified by the store's hashes
        self._sync()  # ranks may have read different checkpoints: agree on the newest
        self._verify("a rollback")
        self.log(f"{streak} non-finite steps in a row: rolled back to step {self.step}")
        if self.gen is not None and self.gen.rank == 0:
            self.report(
                "rollback", to_step=self.step, from_step=came_from, skipped=sorted(skip)[-streak:]
            )
