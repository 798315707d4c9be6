"""A rank vouches for the state it trains from: the self-check of every run.

Every committed step records a cheap *sampled* fingerprint of the rank's state: two
float64 sums (plain and position-weighted) of at most 1,024 evenly spaced elements of
each parameter and optimizer tensor, gathered in one ``cat``: a few kernels whatever
the model, where a sum per tensor would launch two per tensor on a GPU. After every
change of group, and before a run may end COMPLETED, the members check that

- they all hold the same state: the *full* fingerprint (every element of every
  tensor, folded into a fixed number of slots, so every member all-reduces a vector
  of the same length even when their states differ in shape), compared over all
  members by one all-reduce of it and its negation (MAX): equal means max = min;
- some member can *vouch* for it: the state is the one it committed itself (its
  sampled fingerprint is still the one recorded at the commit), or one read from a
  durable checkpoint whose hashes the store verified, or an exact copy (by the full
  fingerprint) of a state its sender vouched for, or the run's first state.

Before the first step there is nothing to vouch for but the factories, which every
rank ran with the run's seed: the ranks compare what they built (:func:`initial_source`)
and all take the state most of them built, so that one rank whose factory drew other
numbers (another thread of its worker drew from torch's generator meanwhile, or the
factory reads something else) cannot hand its weights to the whole run; a rank that
built another state is reported.

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

#: Elements of each tensor the per-step fingerprint reads (evenly spaced).
SAMPLES = 1024
#: Slots the full fingerprint folds its per-tensor sums into (slot 0: how many tensors).
SLOTS = 64
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


def _tensors(trainer: Any) -> list[Any]:
    """The state's tensors in a fixed order: parameters, buffers (BatchNorm's running
    statistics), then each parameter's optimizer state by key."""
    import torch

    tensors = [p.detach() for p in trainer.model.parameters()]
    tensors += [b for b in trainer.model.buffers() if b is not None]
    for group in trainer.optimizer.param_groups:
        for p in group["params"]:
            state = trainer.optimizer.state.get(p, {})
            tensors += [state[k] for k in sorted(state) if torch.is_tensor(state[k])]
    return tensors


def fingerprint(trainer: Any) -> Any:
    """The full fingerprint: each tensor's float64 sum, folded into :data:`SLOTS`
    slots by its position (a vector of the same length for every state)."""
    import torch

    device = trainer.device
    tensors = _tensors(trainer)
    out = torch.zeros(SLOTS + 1, dtype=torch.float64, device=device)
    out[0] = len(tensors)
    if tensors:
        sums = torch.stack([t.reshape(-1).sum(dtype=torch.float64).to(device) for t in tensors])
        at = torch.arange(len(tensors), device=device)
        out.index_add_(0, 1 + at % SLOTS, sums * (1 + at // SLOTS))
    return torch.nan_to_num(out, nan=_NAN)


def sampled_fingerprint(trainer: Any) -> Any:
    """The per-step fingerprint: sums of at most :data:`SAMPLES` elements per tensor."""
    import torch

    picks = [t.reshape(-1)[:: max(1, t.numel() // SAMPLES)] for t in _tensors(trainer)]
    if not picks:
        return torch.zeros(2, dtype=torch.float64)
    flat = torch.cat([p.to(picks[0].device, torch.float64) for p in picks])
    where = torch.arange(1, len(flat) + 1, dtype=torch.float64, device=flat.device)
    return torch.nan_to_num(torch.stack([flat.sum(), (flat * where).sum()]), nan=_NAN)


def initial_source(
    rank: int, world: int, trainer: Any, allreduce: Callable[[Any, str, str], None]
) -> tuple[int, tuple[int, ...]]:
    """Which rank's factory-built state the run starts from, and the ranks that built
    another: the largest set of ranks whose full fingerprints are equal (ties: the one
    with the lowest rank) gives its lowest rank. Every rank decides the same, from the
    same all-gathered table."""
    import torch

    full = fingerprint(trainer)
    table = torch.zeros(world, len(full), dtype=torch.float64, device=full.device)
    table[rank] = full  # added to zeros only: the gather is exact
    allreduce(table, "SUM", "comparing the initial states the ranks built")
    rows = table.cpu()
    groups: list[list[int]] = []
    for r in range(world):
        same = next((g for g in groups if torch.equal(rows[g[0]], rows[r])), None)
        if same is None:
            groups.append([r])
        else:
            same.append(r)
    chosen = max(groups, key=len)  # the first of the largest: it holds the lowest rank
    return chosen[0], tuple(r for r in range(world) if r not in chosen)


class StateCheck:
    """One rank's record of the state it can vouch for, and the check of a group."""

    def __init__(self) -> None:
        self._vouched: tuple[int, Any] | None = None  # (step, sampled fingerprint)

    def committed(self, step: int, trainer: Any) -> None:
        """This rank committed ``step`` itself (or read it from a verified checkpoint)."""
        self._vouched = (step, sampled_fingerprint(trainer))

    def forget(self) -> None:
        """The state came from elsewhere, unchecked: not ours to vouch for."""
        self._vouched = None

    def claim(self, step: int, trainer: Any, sending: bool) -> Any:
        """What a state's sender vouches for, as one tensor every member broadcasts:
        [1, step, full fingerprint] if the sender vouches for its state, zeros if not
        (a receiver passes zeros of the same length, to be overwritten)."""
        import torch

        out = torch.zeros(SLOTS + 3, dtype=torch.float64, device=trainer.device)
        if sending and self.vouches(step, trainer):
            out[0], out[1] = 1.0, float(step)
            out[2:] = fingerprint(trainer)
        return out

    def received(self, trainer: Any, claim: Any) -> None:
        """A peer's state was loaded: vouched for if the sender vouched for it and the
        copy's full fingerprint is the sender's, else not ours to vouch for."""
        import torch

        if float(claim[0]) > 0 and torch.equal(fingerprint(trainer), claim[2:]):
            self._vouched = (int(claim[1]), sampled_fingerprint(trainer))
        else:
            self._vouched = None

    def vouches(self, step: int, trainer: Any) -> bool:
        import torch

        if step <= 0:
            return True  # the run's first state: the factories', sent from rank 0
        if self._vouched is None or self._vouched[0] != step:
            return False
        return bool(torch.equal(self._vouched[1], sampled_fingerprint(trainer)))

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
            self._vouched = (step, sampled_fingerprint(trainer))
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
        self._vouched = (step, sampled_fingerprint(trainer))
        return Verdict(step, repaired, sender)


def _spread(both: Any, n: int) -> str:
    """How far apart the members' full fingerprints are, for a message."""
    gap = (both[:n] + both[n : 2 * n]).abs().max()
    return f"their fingerprints differ by up to {float(gap):.6g}"
