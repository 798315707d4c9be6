"""Byzantine-robust aggregation inside a training step (``ft.fit(aggregator=...)``).

With the mean, a step all-reduces one weighted gradient buffer per rank. With a
robust rule (:mod:`ft_notebook.robust`) every rank needs every rank's gradient, so
each rank computes the mean gradient of its own slice of the batch into its own row
of a ``(world, parameters + 1)`` float64 buffer, zeros elsewhere; the same SUM
all-reduce then gathers the rows exactly (each value is added to zeros only), and
every rank applies the rule to the same rows in the same order. The rules are
deterministic (ties go to the lowest rank), so the replicas stay identical.

A rank's row is what it sends: a worker turned bad by ``%ft chaos byzantine``
(:func:`turn_bad`) sends its attack instead of its gradient. Sign flip, scaled,
Gaussian, bit flip and NaN need only the attacker's own gradient. ALIE and
inner-product manipulation assume an attacker that knows the honest gradients of the
step: a bad worker holds the model, the data and the step's sample order as every
rank does, so it computes them, each other rank's slice in backward passes of its
own (:meth:`Trainer.honest_rows`): the strong, omniscient attacker of their papers,
for the price of a step world times as long on the bad worker.

When workers are lost and the rule's condition fails for the world left
(``on_violation``): ``"stall"`` (the default) raises the run's ``min_workers`` to
the smallest world the rule holds for, so the run is STALLED, saying so, until
workers come back; ``"mean"`` aggregates with the plain mean meanwhile, and rank 0
reports each such step.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ft_notebook.exceptions import AggregationError, TrainingError

#: Attacks a worker turned bad can make ("nan" last: ``%ft chaos nan`` names it).
CHAOS_ATTACKS = ("sign-flip", "scaled", "gaussian", "bit-flip", "alie", "ipm", "nan")
#: Those that need the step's honest gradients, which the bad worker computes.
KNOWING_ATTACKS = ("alie", "ipm")
#: How many times the typical row's length a row must be to be reported as suspect.
_SUSPECT_LENGTH = 10.0


def rule_of(aggregator: Any) -> Any:
    """The rule ``fit(aggregator=...)`` names: None for the plain mean (all-reduce), an
    :class:`~ft_notebook.robust.Aggregator` otherwise (a name tolerates f=1)."""
    from ft_notebook.robust import Aggregator
    from ft_notebook.robust import aggregator as named

    if aggregator is None or aggregator == "mean":
        return None
    if isinstance(aggregator, Aggregator):
        return None if aggregator.name == "mean" else aggregator
    if isinstance(aggregator, str):
        try:
            return named(aggregator, f=1)
        except AggregationError as e:
            raise TrainingError(f"aggregator={aggregator!r}: {e}") from None
    raise TrainingError(
        f"aggregator= takes a rule's name ('median', 'krum', ...) or an "
        f"ft_notebook.robust.aggregator(name, f=...), got {type(aggregator).__name__}."
    )


def smallest_world(rule: Any) -> int:
    """The fewest workers for which ``rule`` bounds its f bad ones."""
    return next(n for n in range(1, 10_000) if rule.holds(n))


@dataclass(frozen=True)
class Aggregate:
    """One step's robust aggregate: the flat gradient (+ the mean loss) to apply, the
    ranks whose rows lay far from it, and whether the rule held for this world."""

    total: Any
    suspects: tuple[int, ...]
    held: bool


def aggregate(rule: Any, rows: Any, on_violation: str) -> Aggregate:
    """Apply ``rule`` to the gathered ``(world, parameters + 1)`` rows (the last column:
    each rank's loss)."""
    import torch

    grads, losses = rows[:, :-1], rows[:, -1]
    held = rule.holds(len(rows))
    if not held and on_violation != "mean":
        raise TrainingError(
            f"{rule.name} with f={rule.f} needs {rule.condition}, but {len(rows)} workers "
            f"train: the run should have stalled (on_violation='stall')."
        )
    combined = rule(grads) if held else grads.mean(dim=0)
    finite = torch.isfinite(losses)
    loss = losses[finite].mean() if bool(finite.any()) else losses.mean()
    total = torch.cat([combined.to(rows.dtype), loss.reshape(1).to(rows.dtype)])
    return Aggregate(total, _suspects(grads, combined), held)


def _suspects(grads: Any, combined: Any) -> tuple[int, ...]:
    """Rows the step did not follow: not finite, pointing against the aggregate, or
    an order of magnitude longer than the typical row. A report, not a rule: what the
    rule did with each row is the rule's own business."""
    import torch

    norms = grads.norm(dim=1)
    typical = (
        float(norms[torch.isfinite(norms)].median()) if bool(torch.isfinite(norms).any()) else 0.0
    )
    against = (grads @ combined) < 0
    bad = ~torch.isfinite(norms) | against | (norms > _SUSPECT_LENGTH * max(typical, 1e-30))
    return tuple(int(r) for r in bad.nonzero().flatten().tolist())


# ---- a worker turned bad (%ft chaos byzantine / nan; %ft chaos resume)

_BAD_LOCK = threading.Lock()
_BAD: dict[str, Any] = {}  # "make": world size -> the attack function; "name", "knows"


def turn_bad(attack: str, dask_worker: Any = None, **params: float) -> str:
    """From now on this worker's ranks send ``attack`` instead of their gradients (an
    RPC: ``client.run(turn_bad, ...)``). ``params`` go to the attack (ALIE's ``z``,
    IPM's ``epsilon``, sign flip's ``scale``, ...)."""
    from ft_notebook.robust import attack as make

    _check_attack(attack)
    made = make(attack, n=2, f=1, **params)  # a bad parameter fails here, not in a step
    if attack in KNOWING_ATTACKS:  # made for the world of each step (ALIE's z needs n)

        def for_world(n: int) -> Any:
            return make(attack, n=n, f=1, **params)

    else:  # made once: Gaussian noise goes on from its generator's state

        def for_world(n: int) -> Any:
            return made

    with _BAD_LOCK:
        _BAD.clear()
        _BAD.update(make=for_world, name=attack, knows=attack in KNOWING_ATTACKS)
    return attack


def knows_the_honest() -> bool:
    """Whether this worker is bad with an attack that needs the honest gradients."""
    with _BAD_LOCK:
        return bool(_BAD.get("knows"))


def _check_attack(attack: str) -> None:
    if attack not in CHAOS_ATTACKS:
        raise AggregationError(
            f"attack {attack!r} cannot run on a worker: one of {', '.join(CHAOS_ATTACKS)} "
            f"(label flip is a data attack; benchmarks/bench_robust.py simulates it)."
        )


def turn_good(dask_worker: Any = None) -> bool:
    """This worker's ranks send their gradients again; whether it was bad."""
    with _BAD_LOCK:
        was = bool(_BAD)
        _BAD.clear()
    return was


def byzantine_worker(client: Any, worker: str, attack: str = "sign-flip", **params: float) -> str:
    """Turn the worker named ``worker`` (or ``"random"``) bad: its ranks send
    ``attack`` (made with ``params``) from now on (``%ft chaos byzantine|nan``);
    returns its name."""
    from ft_notebook.cluster._remote import scheduler_workers
    from ft_notebook.cluster.chaos import choose
    from ft_notebook.robust import attack as make

    _check_attack(attack)  # here, before any worker is touched
    make(attack, n=2, f=1, **params)
    chosen = choose(client.run_on_scheduler(scheduler_workers), worker, None)
    client.run(turn_bad, attack, workers=[chosen["address"]], **params)
    return str(chosen["name"])


def good_again(client: Any, worker: str) -> bool:
    """Make the worker named ``worker`` send its gradients again; whether it was bad."""
    from ft_notebook.cluster._remote import scheduler_workers
    from ft_notebook.cluster.chaos import choose

    chosen = choose(client.run_on_scheduler(scheduler_workers), worker, None)
    return bool(client.run(turn_good, workers=[chosen["address"]]).get(chosen["address"]))


def sent(own: Any, world: int = 1, honest: Any = None, share: float = 1.0) -> Any:
    """What this worker sends for its honest gradient ``own``: the attack, if bad
    (made on the float32 gradient a GPU or a bad rank would hold).

    ``own`` is this rank's gradient weighted by ``share``, its samples' part of what
    the buffer sums (1 for a robust rule's row of mean gradients). ``honest``: the
    other ranks' mean gradients of the step, ``(world - 1, d)``, for an attack that
    needs them (ALIE, IPM); it is made in mean-gradient units and sent weighted by
    ``share``, like the gradient it replaces."""
    import torch

    with _BAD_LOCK:
        make, knows = _BAD.get("make"), bool(_BAD.get("knows"))
    if make is None:
        return own
    own32 = own.to(torch.float32)
    if not knows:
        return make(world)(own32.unsqueeze(0), own32).to(own.dtype)
    if honest is None or len(honest) == 0 or share == 0:
        return own  # alone, or nothing of its own to replace: there is no one to imitate
    fake = make(world)(honest.to(own.device, torch.float32), own32 / share)
    return (fake * share).to(own.dtype)
