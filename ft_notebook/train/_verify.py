"""A rank vouches for the state it trains from: the self-check of every run.

Every committed step records a cheap fingerprint of the rank's state (the float64
sum of every 61st element of each parameter and optimizer tensor: 0.14 ms for a
1M-parameter model with Adam, against 1.2 ms for every element). After every change
of group, and before a run may end COMPLETED, the members check that

- they all hold the same state: the full fingerprint (every element), compared over
  all members by one all-reduce of it and its negation (MAX): equal means max = min;
- some member can *vouch* for it: the state is the one it committed itself (its
  sampled fingerprint is still the one recorded at the commit), or one read from a
  durable checkpoint whose hashes the store verified, or the run's first state.

When they differ, every member takes the state of the lowest rank that vouches,
which is reported (a ``state-repaired`` event); when nobody vouches, or the states
still differ after that, the run fails with :class:`StateUnverified` and the numbers.
A run never goes on, or ends, from a state it cannot vouch for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ft_notebook.exceptions import TrainingError

#: Every STRIDE-th element goes into the per-step fingerprint.
STRIDE = 61
#: What a NaN counts as in a fingerprint, so that members holding the same NaN agree.
_NAN = 1.0e300


class StateUnverified(TrainingError):
    """The members' training states differ, and none can be vouched for."""


@dataclass(frozen=True)
class Verdict:
    """What a check found: the members agreed at once, or these ranks took the state
    of ``source``."""

    step: int
    repaired: tuple[int, ...] = ()
    source: int | None = None


def fingerprint(trainer: Any, stride: int = 1) -> Any:
    """Float64 sums of every ``stride``-th element of the state's tensors, in a fixed
    order (parameters, then each parameter's optimizer state by key)."""
    import torch

    tensors = [p.detach() for p in trainer.model.parameters()]
    for group in trainer.optimizer.param_groups:
        for p in group["params"]:
            state = trainer.optimizer.state.get(p, {})
            tensors += [state[k] for k in sorted(state) if torch.is_tensor(state[k])]
    sums = [t.reshape(-1)[::stride].sum(dtype=torch.float64) for t in tensors]
    out = torch.stack(sums) if sums else torch.zeros(1, dtype=torch.float64)
    return torch.nan_to_num(out.to(trainer.device), nan=_NAN)


class StateCheck:
    """One rank's record of the state it can vouch for, and the check of a group."""

    def __init__(self) -> None:
        self._vouched: tuple[int, Any] | None = None  # (step, sampled fingerprint)

    def committed(self, step: int, trainer: Any) -> None:
        """This rank committed ``step`` itself (or read it from a verified checkpoint)."""
        self._vouched = (step, fingerprint(trainer, STRIDE))

    def forget(self) -> None:
        """The state came from elsewhere (a peer): not ours to vouch for until checked."""
        self._vouched = None

    def vouches(self, step: int, trainer: Any) -> bool:
        import torch

        if step <= 0:
            return True  # the run's first state: the factories', sent from rank 0
        if self._vouched is None or self._vouched[0] != step:
            return False
        return bool(torch.equal(self._vouched[1], fingerprint(trainer, STRIDE)))

    def check(
        self,
        step: int,
        rank: int,
        world: int,
        trainer: Any,
        allreduce: Callable[[Any, str, str], None],
        broadcast: Callable[[Any, int, str], None],
        send_state: Callable[[int], None],
        when: str,
    ) -> Verdict:
        """Check the group's state at ``step`` (see the module doc); raise
        StateUnverified if it cannot be vouched for."""
        import torch

        full = fingerprint(trainer)
        n = len(full)
        vouch = self.vouches(step, trainer)
        both = torch.cat([full, -full, torch.tensor([float(vouch)], device=full.device)])
        allreduce(both, "MAX", "comparing the members' states")
        agreed = bool(torch.equal(both[:n], -both[n : 2 * n]))
        anyone = bool(both[-1] > 0)
        if agreed and anyone:
            self._vouched = (step, fingerprint(trainer, STRIDE))
            return Verdict(step)
        source = torch.tensor([rank if vouch else world], device=full.device)
        allreduce(source, "MIN", "choosing a member that vouches for its state")
        sender = int(source[0])
        if sender == world:
            held = "hold the same state" if agreed else f"differ ({_spread(both, n)})"
            raise StateUnverified(
                f"After {when}, at step {step}, the {world} members {held}, and none of "
                f"them holds a state it committed itself. Training would go on from a "
                f"state nobody can vouch for, so the run stops here: go on from the "
                f"newest checkpoint with ft.fit(..., resume=True)."
            )
        # who differs from the sender: told by one all-reduce of a flag per rank
        reference = full.clone()
        broadcast(reference, sender, "sending the vouched state's fingerprint")
        flags = torch.zeros(world, dtype=torch.float64, device=full.device)
        flags[rank] = 0.0 if torch.equal(full, reference) else 1.0
        allreduce(flags, "MAX", "telling who holds another state")
        repaired = tuple(int(r) for r in (flags > 0).nonzero().flatten().tolist())
        send_state(sender)
        again = fingerprint(trainer)
        same = torch.tensor([0.0 if torch.equal(again, reference) else 1.0], device=full.device)
        allreduce(same, "MAX", "checking the repaired states")
        if float(same[0]) > 0:
            raise StateUnverified(
                f"After {when}, at step {step}, ranks {list(repaired)} held another state "
                f"than rank {sender}, and still did after taking rank {sender}'s. The run "
                f"stops here: go on from the newest checkpoint with ft.fit(..., resume=True)."
            )
        self._vouched = (step, fingerprint(trainer, STRIDE))
        return Verdict(step, repaired, sender)


def _spread(both: Any, n: int) -> str:
    """How far apart the members' full fingerprints are, for a message."""
    gap = (both[:n] + both[n : 2 * n]).abs().max()
    return f"their fingerprints differ by up to {float(gap):.6g}"
