"""How often to checkpoint: from the failure rate, the save cost and the targets.

Checkpointing too often wastes time saving; too rarely, time redoing lost work. With
failures arriving at random (a Poisson process of mean time between failures ``M``),
a save costing ``δ`` and a restart costing ``R``:

- **Young** (1974): τ = √(2δM), first order in δ/M.
- **Daly** (2006, "A higher order estimate of the optimum checkpoint interval for
  restart dumps", FGCS 22): τ = √(2δM)·[1 + ⅓√(δ/2M) + ⅑(δ/2M)] − δ for δ < 2M, and
  τ = M for δ ≥ 2M. His examples (δ = 5 min): M = 24 h, 6 h, 15 min give 117, 57 and
  9.1 min.
- Daly's model of the wall-clock time of a job needing ``T`` of work checkpointed every
  τ: ``T_w = M·e^{R/M}·(e^{(τ+δ)/M} − 1)·T/τ``; the **waste** is ``1 − T/T_w``.

The targets: **RPO** (recovery point: the most work a failure may lose) is met when
τ + δ ≤ RPO, since a failure just before a save commits loses the interval and the
save; when Daly's τ is longer, the plan checkpoints every RPO − δ and shows what that
costs. **RTO** (recovery time: how long until training goes on) is met when R ≤ RTO.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ft_notebook.exceptions import PlanError

__all__ = [
    "CheckpointPlan",
    "daly_interval",
    "human_duration",
    "measured_beside",
    "parse_duration",
    "plan",
    "waste",
    "young_interval",
]


def young_interval(cost: float, mtbf: float) -> float:
    """Young's interval √(2δM), in the units of the arguments."""
    return math.sqrt(2 * cost * mtbf)


def daly_interval(cost: float, mtbf: float) -> float:
    """Daly's higher-order interval; ``mtbf`` when the save costs 2M or more."""
    if cost >= 2 * mtbf:
        return mtbf
    x = cost / (2 * mtbf)
    return math.sqrt(2 * cost * mtbf) * (1 + math.sqrt(x) / 3 + x / 9) - cost


def waste(interval: float, cost: float, mtbf: float, restart: float = 0.0) -> float:
    """The fraction of wall-clock time not spent on new work (Daly's model)."""
    wall_per_work = mtbf * math.exp(restart / mtbf) * math.expm1((interval + cost) / mtbf)
    return 1 - interval / wall_per_work


def expected_loss(interval: float, cost: float, mtbf: float) -> float:
    """The work a failure loses on average: the time since the last committed save,
    for a failure that falls in a segment of τ + δ (exponential, conditioned on it)."""
    segment = interval + cost
    return mtbf - segment / math.expm1(segment / mtbf)


@dataclass(frozen=True)
class CheckpointPlan:
    """A checkpoint interval and what it costs, all in seconds."""

    mtbf: float
    cost: float
    restart: float
    rpo: float | None
    rto: float | None
    young: float
    daly: float
    #: the interval to use: Daly's, or shorter where the RPO asks for it
    interval: float
    waste: float  # at ``interval``
    daly_waste: float
    expected_loss: float  # per failure, at ``interval``
    worst_loss: float  # τ + δ
    rpo_met: bool | None
    rto_met: bool | None

    def explain(self) -> list[str]:
        """The plan as text: the formulas with the numbers in them."""
        d, m, h = self.cost, self.mtbf, human_duration
        lines = [
            f"failures every {h(m)} on average (MTBF M), a save costs {h(d)} (δ), "
            f"a restart {h(self.restart)} (R)",
            f"Young: τ = √(2δM) = √(2·{d:g}·{m:g}) s = {h(self.young)}",
        ]
        if d >= 2 * m:
            lines.append(f"Daly: δ ≥ 2M, so τ = M = {h(self.daly)}")
        else:
            lines.append(
                f"Daly: τ = √(2δM)·[1 + ⅓√(δ/2M) + ⅑(δ/2M)] − δ = {h(self.daly)} "
                f"(δ/2M = {d / (2 * m):.3g})"
            )
        lines.append(
            f"waste at Daly's τ: {self.daly_waste:.1%} of wall-clock time "
            f"(1 − τ / (M·e^(R/M)·(e^((τ+δ)/M) − 1)))"
        )
        if self.rpo is not None:
            if self.interval < self.daly:
                lines.append(
                    f"RPO {h(self.rpo)}: Daly's τ + δ = {h(self.daly + d)} would "
                    f"lose more; checkpoint every RPO − δ = {h(self.interval)}, which "
                    f"wastes {self.waste:.1%}"
                )
            verdict = "met" if self.rpo_met else "NOT met: a save alone costs more than the RPO"
            lines.append(f"RPO {h(self.rpo)}: at most τ + δ = {h(self.worst_loss)} lost: {verdict}")
        if self.rto is not None:
            verdict = "met" if self.rto_met else "NOT met: make restarts faster"
            lines.append(f"RTO {h(self.rto)}: a restart takes {h(self.restart)}: {verdict}")
        lines.append(
            f"checkpoint every {h(self.interval)}; a failure loses "
            f"{h(self.expected_loss)} of work on average, {h(self.worst_loss)} at most"
        )
        return lines


def plan(
    mtbf: float | str,
    cost: float | str,
    restart: float | str = 0.0,
    rpo: float | str | None = None,
    rto: float | str | None = None,
) -> CheckpointPlan:
    """The checkpoint interval for failures every ``mtbf`` and saves costing ``cost``.

    Each duration is seconds or a string with its unit, as ``%ft plan`` takes them:
    ``plan("6h", "5m", "10m", rpo="30m")`` is ``plan(21600, 300, 600, rpo=1800)``.
    """
    mtbf, cost, restart = _seconds(mtbf), _seconds(cost), _seconds(restart)
    rpo = None if rpo is None else _seconds(rpo)
    rto = None if rto is None else _seconds(rto)
    for name, value in (("mtbf", mtbf), ("cost", cost)):
        if not value > 0 or not math.isfinite(value):
            raise PlanError(f"{name} must be a positive number of seconds, got {value!r}.")
    for name, opt in (("restart", restart), ("rpo", rpo), ("rto", rto)):
        if opt is not None and (opt < 0 or not math.isfinite(opt)):
            raise PlanError(f"{name} must be zero or more seconds, got {opt!r}.")
    daly = daly_interval(cost, mtbf)
    interval = daly
    rpo_met = None
    if rpo is not None:
        rpo_met = rpo > cost
        if rpo_met and daly + cost > rpo:
            interval = rpo - cost
    return CheckpointPlan(
        mtbf=mtbf,
        cost=cost,
        restart=restart,
        rpo=rpo,
        rto=rto,
        young=young_interval(cost, mtbf),
        daly=daly,
        interval=interval,
        waste=waste(interval, cost, mtbf, restart),
        daly_waste=waste(daly, cost, mtbf, restart),
        expected_loss=expected_loss(interval, cost, mtbf),
        worst_loss=interval + cost,
        rpo_met=rpo_met,
        rto_met=None if rto is None else restart <= rto,
    )


def measured_beside(
    made: CheckpointPlan, recoveries: list[dict[str, Any]], step_time_s: float | None
) -> list[str]:
    """Each recovery a run measured, beside the plan: its RTO (against the RTO target,
    else the plan's R) and the work it lost, its steps lost at the run's step time
    (against the RPO, else the plan's worst case τ + δ)."""
    if not recoveries:
        return ["no recoveries measured yet: nothing to set beside the plan"]
    h = human_duration
    rto = made.rto if made.rto is not None else made.restart
    rpo = made.rpo if made.rpo is not None else made.worst_loss
    rto_name = "RTO" if made.rto is not None else "R"
    rpo_name = "RPO" if made.rpo is not None else "τ + δ"
    lines = []
    for r in recoveries:
        took = float(r.get("rto_s") or 0.0)
        steps = int(r.get("steps_lost") or 0)
        lost = steps * step_time_s if step_time_s else None
        lost_text = f"{steps} steps lost" + (f" ({h(lost)} of work)" if lost is not None else "")
        took_ok = "within" if took <= rto else "OVER"
        lost_ok = "?" if lost is None else ("within" if lost <= rpo else "OVER")
        lines.append(
            f"recovery at step {r.get('step', '?')} ({r.get('cause', '?')}): took {h(took)}, "
            f"{took_ok} {rto_name} {h(rto)}; {lost_text}, {lost_ok} {rpo_name} {h(rpo)}"
        )
    return lines


_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|min|m|h|d)?\s*")


def parse_duration(text: str) -> float:
    """Seconds in ``"6h"``, ``"2s"``, ``"10m"``, ``"1.5d"``, ``"250ms"`` (no unit: s)."""
    found = _DURATION.fullmatch(text)
    if found is None:
        raise PlanError(
            f"{text!r} is not a duration; write a number and a unit: 250ms, 2s, 10m, 6h, 1d."
        )
    return float(found.group(1)) * _UNITS[found.group(2) or "s"]


def _seconds(value: float | str) -> float:
    return parse_duration(value) if isinstance(value, str) else float(value)


def human_duration(seconds: float) -> str:
    """``seconds`` in the unit a person reads it in: 250 ms, 42 s, 57 min, 6 h, 3 d."""
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} d"
