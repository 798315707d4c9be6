"""Random fault sequences against real training runs, each checked against an
undisturbed run of the same problem.

A *drill* (:func:`run_drill`) trains :func:`drill_problem` on a cluster of real
worker processes while the faults of a :class:`FaultPlan` (drawn from a seed by
:func:`draw_faults`) strike at chosen steps: SIGKILLs of one member, of rank 0, of two
members at once, of a member while the run recovers from another, of a restarted
worker while it warms up to rejoin, and SIGSTOP hangs. Then it checks what a user
relies on, against references a broken implementation cannot fake:

- the run COMPLETED;
- every sample was used exactly once per epoch: the model carries one counter per
  sample, which each use raises by exactly 1.0 (see :class:`DrillModel`), through the
  real all-reduce;
- the final weights are those of the undisturbed run: ``torch.equal`` with
  ``deterministic=True``, within a relative ``1e-4`` otherwise (max |a - b| over
  max |b|);
- every fault is visible: its victim is named in a recovery of the run, or (a worker
  killed before it was admitted again) in a ``worker-lost`` event of the cluster.

``tests/chaos/test_train_drills.py`` runs a few seeds; ``benchmarks/bench_drills.py``
runs many.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ft_notebook.testing._chaos_faults import Fault, FaultKind, FaultPlan, draw_faults, strike
from ft_notebook.testing._poll import poll_for
from ft_notebook.testing.training import PacedDataset

__all__ = [
    "TOLERANCE",
    "DrillModel",
    "DrillResult",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "distance",
    "draw_faults",
    "drill_problem",
    "final_weights",
    "reference_weights",
    "run_drill",
    "wait_for_workers",
]

#: Relative tolerance of a run without ``deterministic=True`` against the reference.
TOLERANCE = 1e-4


# ---- the problem: an MLP that also counts every use of every sample


class DrillModel(torch.nn.Module):
    """A network (by default a ReLU MLP 32-128-128-4; ``net``: a factory of another,
    see :mod:`~ft_notebook.testing.drill_models`) and one counter per sample.

    The counters are the optimizer's first parameter group: AdamW with betas (0, 0),
    eps 1e-30 and lr 1, whose update is exactly ``-lr * g / |g|`` for a non-zero
    gradient and 0 for a zero one. The loss subtracts the mean of the batch's
    counters, so each use of a sample raises its counter by exactly 1.0, whatever the
    weights of the parts the batch was cut into. The MLP is trained by AdamW (lr
    1e-3): a problem on which float32 sums taken in another order end percents apart.
    """

    def __init__(
        self,
        samples: int,
        features: int = 32,
        hidden: int = 128,
        net: Callable[[], torch.nn.Module] | None = None,
    ) -> None:
        super().__init__()
        self.counts = torch.nn.Parameter(torch.zeros(samples))
        self.net = (
            net()
            if net is not None
            else torch.nn.Sequential(
                torch.nn.Linear(features, hidden),
                torch.nn.ReLU(),
                torch.nn.Linear(hidden, hidden),
                torch.nn.ReLU(),
                torch.nn.Linear(hidden, 4),
            )
        )


def drill_optimizer(params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    counters: dict[str, Any] = {"params": params[:1], "lr": 1.0, "betas": (0.0, 0.0)}
    counters.update(eps=1e-30, weight_decay=0.0)
    weights: dict[str, Any] = {"params": params[1:]}
    return torch.optim.AdamW([counters, weights], lr=1e-3)


def drill_step(model: DrillModel, batch: Any, loss: Any) -> torch.Tensor:
    x, y, index = batch
    out: torch.Tensor = loss(model.net(x), y) - model.counts[index].mean()
    return out


def drill_mlp() -> torch.nn.Module:
    return DrillModel(0).net


def drill_problem(
    samples: int = 12288,
    batch: int = 96,
    delay_s: float = 0.015,
    seed: int = 7,
    *,
    counters: bool = True,
    model: str = "mlp",
) -> dict[str, Any]:
    """Keyword arguments for ``ft.fit``: the model, data, optimizer and step of a drill.

    The defaults are the run that first showed runs losing workers ending far from
    the undisturbed one (issue 17): 12,288 samples of 32 features with 4 random
    classes, a global batch of 96; trained for 2 epochs (256 steps).
    ``counters=False``: that run's own model, the bare MLP (no sample counters).
    ``model``: ``"cnn"`` or ``"transformer"`` for the realistic problems of
    :mod:`~ft_notebook.testing.drill_models` (the same samples, batch and steps).
    """
    if model != "mlp":
        from ft_notebook.testing.drill_models import realistic_problem

        return {**realistic_problem(model, samples, delay_s), "seed": seed}
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 32, generator=g)
    y = torch.randint(0, 4, (samples,), generator=g)
    if not counters:
        return {
            "model": drill_mlp,
            "data": PacedDataset(x, y, delay_s=delay_s),
            "optimizer": functools.partial(torch.optim.AdamW, lr=1e-3),
            "loss": torch.nn.functional.cross_entropy,
            "batch_size": batch,
        }
    return {
        "model": functools.partial(DrillModel, samples),
        "data": PacedDataset(x, y, torch.arange(samples), delay_s=delay_s),
        "optimizer": drill_optimizer,
        "loss": torch.nn.functional.cross_entropy,
        "train_step": drill_step,
        "batch_size": batch,
    }


def reference_weights(
    client: Any,
    *,
    name: str,
    store: str,
    deterministic: bool = False,
    epochs: int = 2,
    **problem: Any,
) -> list[torch.Tensor]:
    """The final weights of an undisturbed run of the drill problem: what a drill with
    the same ``deterministic`` and problem must end on."""
    from ft_notebook.train import fit

    run = fit(
        epochs=epochs,
        cluster=client,
        name=name,
        store=store,
        checkpoint_every=16,
        deterministic=deterministic,
        wait=True,
        timeout=600,
        **drill_problem(**problem),
    )
    return final_weights(run)


def final_weights(run: Any) -> list[torch.Tensor]:
    """The network's whole state at the end of ``run``: parameters and buffers
    (BatchNorm's running statistics), the counters left out."""
    return _weights(run.model())


def _weights(model: torch.nn.Module) -> list[torch.Tensor]:
    net = model.net if isinstance(model, DrillModel) else model
    return [t.detach().clone() for t in net.state_dict().values()]


# ---- one drill


@dataclass
class DrillResult:
    plan: FaultPlan
    state: str
    #: The drill problem's model: "mlp", "cnn" or "transformer".
    model: str = "mlp"
    #: (kind, step it struck at, victims); faults the run ended before are left out.
    struck: list[tuple[str, int, tuple[str, ...]]] = field(default_factory=list)
    #: Samples not used exactly once per epoch (counted by a :class:`DrillModel`).
    counts_off: int = 0
    counted: bool = False
    #: max |final - reference| / max |reference| over the MLP's parameters.
    distance: float = 0.0
    identical: bool = False
    #: The eval_fn's values on the final model and on the undisturbed run's (the
    #: realistic problems: accuracy or held-out loss); empty without an eval_fn.
    metric: dict[str, float] = field(default_factory=dict)
    reference_metric: dict[str, float] = field(default_factory=dict)
    #: Victims named neither in a recovery nor in a worker-lost event.
    unseen: list[str] = field(default_factory=list)
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    #: States repaired by the self-check (members that held another state).
    repairs: int = 0
    #: Steps from the last fault that struck to the first progress point with every
    #: worker back in the run; None if the run ended with fewer.
    world_back_after: int | None = None
    seconds: float = 0.0

    @property
    def verified(self) -> bool:
        """Every recovery went on from a state its members checked and vouched for."""
        return all(r.get("verified") for r in self.recoveries)

    @property
    def metric_gap(self) -> float:
        """The largest difference of an eval_fn value from the undisturbed run's."""
        return max((abs(v - self.reference_metric[k]) for k, v in self.metric.items()), default=0.0)

    @property
    def ok(self) -> bool:
        close = self.identical if self.plan.deterministic else self.distance <= TOLERANCE
        same_metric = self.metric_gap == 0 if self.plan.deterministic else self.metric_gap <= 0.01
        counted = self.counts_off == 0
        return (
            self.state == "COMPLETED"
            and counted
            and close
            and same_metric
            and not self.unseen
            and self.verified
        )

    def describe(self) -> str:
        faults = ", ".join(f"{k}@{s} on {'+'.join(v)}" for k, s, v in self.struck) or "none"
        return (
            f"{self.plan.describe()} -> {self.state}; struck: {faults}; "
            f"counts off: {self.counts_off}; distance {self.distance:.3g}"
            f"{' (identical)' if self.identical else ''}; metric {self.metric} "
            f"(undisturbed {self.reference_metric}); unseen: {self.unseen}; "
            f"verified: {self.verified}; repairs: {self.repairs}; "
            f"every worker back {self.world_back_after} steps after the last fault; "
            f"recoveries: {[(r.get('how'), r.get('cause')) for r in self.recoveries]}"
        )


def run_drill(
    client: Any,
    plan: FaultPlan,
    reference: list[torch.Tensor],
    *,
    name: str,
    store: str,
    epochs: int = 2,
    workers: int = 3,
    timeout: float = 240.0,
    **problem: Any,
) -> DrillResult:
    """Train with ``plan``'s faults and check the run (see the module doc)."""
    from ft_notebook.train import fit

    started = time.monotonic()
    wait_for_workers(client, workers)
    since = _last_seq(client)
    kw = drill_problem(**problem)
    run = fit(
        epochs=epochs,
        cluster=client,
        name=name,
        store=store,
        wait=False,
        checkpoint_every=16,
        min_workers=1,
        deterministic=plan.deterministic,
        **kw,
    )
    result = DrillResult(plan, state="", model=str(problem.get("model", "mlp")))
    for fault in plan.faults:
        victims = strike(client, run, fault)
        if victims is None:
            break  # the run ended first
        if victims:
            result.struck.append((fault.kind.value, fault.step, victims))
    run.wait(timeout=timeout)
    info = run.info()
    result.state, result.recoveries = info["state"], info["recoveries"]
    result.repairs = sum(1 for note in info["notes"] if note.get("kind") == "state-repaired")
    result.world_back_after = _world_back_after(info, result.struck, workers)
    model = run.model()
    result.counted = isinstance(model, DrillModel)
    if result.counted:
        result.counts_off = int((model.counts.detach() != epochs).sum())
    weights = _weights(model)
    result.identical = all(torch.equal(a, b) for a, b in zip(weights, reference, strict=True))
    result.distance = distance(weights, reference)
    if kw.get("eval_fn") is not None:
        result.metric = kw["eval_fn"](model)
        result.reference_metric = kw["eval_fn"](_with_weights(kw["model"](), reference))
    result.unseen = _unseen(client, result, since)
    result.seconds = time.monotonic() - started
    return result


def distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """max |a - b| over max |b|, over the floating tensors together; infinite when an
    integer tensor (a BatchNorm's ``num_batches_tracked``) differs at all."""
    if any(not x.is_floating_point() and not torch.equal(x, y) for x, y in zip(a, b, strict=True)):
        return math.inf
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if y.is_floating_point()]
    scale = max(float(y.abs().max()) for _, y in pairs)
    return max(float((x - y).abs().max()) for x, y in pairs) / scale


def _with_weights(model: torch.nn.Module, weights: list[torch.Tensor]) -> torch.nn.Module:
    """``model`` (a fresh drill model) holding the network state ``weights``."""
    net = model.net if isinstance(model, DrillModel) else model
    net.load_state_dict(dict(zip(net.state_dict(), weights, strict=True)))
    return model


def _world_back_after(
    info: dict[str, Any], struck: list[tuple[str, int, tuple[str, ...]]], workers: int
) -> int | None:
    last = max((step for _kind, step, _victims in struck), default=0)
    back = [
        int(p["step"])
        for p in info["history"]
        if p.get("world_size") == workers and int(p.get("step") or 0) > last
    ]
    return min(back) - last if back else None


def wait_for_workers(client: Any, n: int) -> None:
    """Wait (90 s at most) until the cluster has ``n`` workers or more: a fault before
    may have killed some that are still coming back."""
    poll_for(
        lambda: len(client.scheduler_info(n_workers=-1)["workers"]) >= n,
        timeout=90,
        what=f"{n} workers",
    )


def _last_seq(client: Any) -> int:
    from ft_notebook.events import cluster_topic, history

    events = history(cluster_topic(), via=client)
    return max((e.seq for e in events), default=0)


def _unseen(client: Any, result: DrillResult, since: int) -> list[str]:
    """Victims named neither in a recovery's cause nor in a worker-lost or
    worker-hung event of the cluster since the drill began."""
    from ft_notebook.events import cluster_topic, history

    causes = " ".join(str(r.get("cause", "")) for r in result.recoveries)
    lost = {
        str(e.data.get("name"))
        for e in history(cluster_topic(), since=since, via=client)
        if e.kind in ("worker-lost", "worker-hung")
    }
    return [
        victim
        for _kind, _step, victims in result.struck
        for victim in victims
        if f"{victim}:" not in causes and victim not in lost
    ]
