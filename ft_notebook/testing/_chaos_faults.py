"""The faults of a drill: what they are, how a plan of them is drawn from a seed,
and how each strikes a running run.

:func:`strike` waits for the run to reach the fault's step, then signals real worker
processes through :mod:`ft_notebook.cluster.chaos` (SIGKILL, SIGSTOP), and returns
the workers it struck: the victims a drill then expects to see named in a recovery
or a ``worker-lost`` event. It strikes only members that are alive when it looks,
and is deterministic for a given fault (its random choices are seeded by the kind
and step). :mod:`ft_notebook.testing.training_chaos` runs the drills and re-exports
the fault types and :func:`draw_faults`.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Any

from ft_notebook.testing._poll import poll_for

#: The states a run ends in: no fault strikes after one.
ENDED = ("COMPLETED", "FAILED", "CANCELLED")


class FaultKind(str, enum.Enum):
    KILL = "kill"  # SIGKILL of a random member
    KILL_RANK0 = "kill-rank0"  # SIGKILL of the member that checkpoints and reports
    DOUBLE_KILL = "double-kill"  # two members SIGKILLed back to back
    KILL_DURING_RECOVERY = "kill-during-recovery"  # a second kill once the first is seen
    KILL_JOINER = "kill-joiner"  # a killed member killed again while it warms up to rejoin
    HANG = "hang"  # SIGSTOP of a member: evicted when its heartbeats stop


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    step: int  # strikes once the run has committed this many steps
    #: The worker to strike (a kill or hang); None: a member chosen at random.
    victim: str | None = None


@dataclass(frozen=True)
class FaultPlan:
    seed: int
    deterministic: bool
    faults: tuple[Fault, ...]

    def describe(self) -> str:
        mode = "deterministic" if self.deterministic else "default"
        return f"seed {self.seed} ({mode}): " + ", ".join(
            f"{f.kind.value}@{f.step}" for f in self.faults
        )


def draw_faults(seed: int, steps: int, *, most: int = 3) -> FaultPlan:
    """One to ``most`` faults at increasing steps inside a run of ``steps`` steps; odd
    seeds run with ``deterministic=True``."""
    rng = random.Random(seed)
    count = rng.randint(1, most)
    first, last = max(4, steps // 16), max(5, steps * 3 // 4)
    at = sorted(rng.sample(range(first, last), count))
    kinds = list(FaultKind)
    faults = tuple(Fault(rng.choice(kinds), s) for s in at)
    return FaultPlan(seed, seed % 2 == 1, faults)


def _at_step(run: Any, step: int) -> dict[str, Any] | None:
    """The run's info once it has committed ``step`` steps; None if it ended first."""

    def reached() -> dict[str, Any] | None:
        info: dict[str, Any] = run.info()
        return info if info["step"] >= step or info["state"] in ENDED else None

    info = poll_for(reached, timeout=120, what=f"step {step} of {run.name}")
    assert info is not None  # poll_for returns only what is truthy
    return None if info["state"] in ENDED else info


def strike(client: Any, run: Any, fault: Fault) -> tuple[str, ...] | None:
    """Carry out ``fault`` once the run reaches its step; the workers it struck
    (empty if none of the run's members was alive to strike), None if the run ended
    first. Members listed by the run but already gone are not struck."""
    info = _at_step(run, fault.step)
    if info is None:
        return None
    alive = _workers(client)
    members = [str(m) for m in info["members"] if str(m) in alive]
    if not members:
        return ()
    rng = random.Random(f"{fault.kind.value}-{fault.step}")
    chosen = fault.victim if fault.victim in members else None
    if fault.kind is FaultKind.HANG:
        return _signal(client, "hang", [chosen or rng.choice(members)])
    if fault.kind is FaultKind.KILL_RANK0:
        return _signal(client, "kill", members[:1])
    if fault.kind is FaultKind.DOUBLE_KILL and len(members) >= 3:
        return _signal(client, "kill", rng.sample(members, 2))
    victim = chosen or rng.choice(members)
    generation = info["generation"]
    struck = _signal(client, "kill", [victim])
    if fault.kind is FaultKind.KILL_DURING_RECOVERY and len(members) >= 3 and struck:
        poll_for(
            lambda: (i := run.info())["generation"] > generation or i["state"] != "RUNNING",
            timeout=30,
            what="the first kill noticed",
        )
        alive = _workers(client)
        others = [str(m) for m in run.info()["members"] if str(m) != victim and str(m) in alive]
        return struck + (_signal(client, "kill", [rng.choice(others)]) if others else ())
    if fault.kind is FaultKind.KILL_JOINER and struck and _back(client, victim, alive[victim], run):
        return struck + _signal(client, "kill", [victim])
    return struck


def _workers(client: Any) -> dict[str, str]:
    """The cluster's workers now: name -> address."""
    from ft_notebook.cluster._remote import scheduler_workers

    return {str(w["name"]): w["address"] for w in client.run_on_scheduler(scheduler_workers)}


def _signal(client: Any, how: str, names: list[str]) -> tuple[str, ...]:
    """Kill or hang each named worker; those that were gone already are left out."""
    from ft_notebook.cluster.chaos import hang_worker, kill_worker
    from ft_notebook.exceptions import ClusterError

    act = hang_worker if how == "hang" else kill_worker
    struck = []
    for name in names:
        try:
            act(client, name)
        except ClusterError:  # gone between the listing and the signal
            continue
        struck.append(name)
    return tuple(struck)


def _back(client: Any, name: str, address: str, run: Any) -> bool:
    """Wait until the killed ``name`` is a worker again, at a new address (warming up
    to rejoin); False if the run ended first."""

    def back_or_ended() -> str | None:
        now = _workers(client).get(name)
        if now is not None and now != address:
            return "back"
        return "ended" if run.info()["state"] in ENDED else None

    return poll_for(back_or_ended, timeout=60, what=f"worker {name} restarted") == "back"
