"""Robust aggregation: what it costs, and whether it holds, against ByzFL.

**Cost.** Time per aggregation of ``n`` stacked float32 gradients of ``d`` elements
(d = 1e6 and 1e7, n = 4 and 8, f = 1), for each rule of ``ft_notebook.robust``,
against the plain mean and against ByzFL 0.0.11's implementation of the same rule on
the same inputs (its torch path), interleaved, medians of ``--reps``.

**Accuracy.** A grid in one process through the same aggregator code: an MLP
(32-64-10) trained data-parallel over ``n = 8`` simulated workers of which ``f = 2``
are Byzantine, on a synthetic 10-class problem (Gaussian clusters, 20,000 training
and 5,000 test points, each worker its own shard), 3 seeds, each rule against each
attack (none, sign flip, Gaussian, scaled, ALIE, IPM, label flip), 300 steps of SGD
with momentum 0.9, where each worker sends its momentum (Karimireddy et al.: the
worker momentum centered clipping is designed for). Test accuracy, the mean of the
3 seeds, and the worst case over attacks per rule, as ByzFL's protocol reports it.

    .venv/bin/python benchmarks/bench_robust.py [--cost] [--grid] [--reps 7]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import statistics
import sys
import time
from typing import Any

import torch

from ft_notebook.robust import aggregator, attack

COST_RULES = {
    # ours -> ByzFL's, parameters matched
    "median": lambda f, b: b.Median(),
    "trimmed-mean": lambda f, b: b.TrMean(f=f),
    "geometric-median": lambda f, b: b.GeometricMedian(nu=0.1, T=3),
    "krum": lambda f, b: b.Krum(f=f),
    "multi-krum": lambda f, b: b.MultiKrum(f=f),
    "centered-clipping": lambda f, b: b.CenteredClipping(L=1, tau=100.0),
}
OURS = {
    "median": {},
    "trimmed-mean": {},
    "geometric-median": {"nu": 0.1, "iterations": 3, "start": "zeros"},
    "krum": {},
    "multi-krum": {},
    "centered-clipping": {"tau": 100.0, "iterations": 1},
}


def byzfl() -> Any:
    spec = importlib.util.find_spec("byzfl")
    if spec is None:
        raise SystemExit("ByzFL is missing: `make install` installs it (without its dependencies)")
    if "byzfl" not in sys.modules:  # its __init__ imports torchvision: not run
        sys.modules["byzfl"] = importlib.util.module_from_spec(spec)
    return importlib.import_module("byzfl.aggregators")


def _time(fn: Any, x: torch.Tensor) -> float:
    start = time.perf_counter()
    fn(x)
    return time.perf_counter() - start


def cost(reps: int) -> None:
    b = byzfl()
    torch.set_num_threads(2)
    print("| rule | n | d | ours (ms) | mean (ms) | ByzFL (ms) | ours / ByzFL | ours / mean |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for d in (1_000_000, 10_000_000):
        for n in (4, 8):
            reps_here = min(reps, 5) if d == 10_000_000 and n == 8 else reps
            x = torch.randn(n, d, generator=torch.Generator().manual_seed(n))
            mean = aggregator("mean")
            for rule, theirs in COST_RULES.items():
                if rule in ("krum", "multi-krum") and n < 5:
                    continue  # n >= 2f + 3
                ours = aggregator(rule, 1, **OURS[rule])
                reference = theirs(1, b)
                t_ours, t_mean, t_ref = [], [], []
                for _ in range(reps_here):  # interleaved: a drift in speed hits all three
                    t_ours.append(_time(ours, x))
                    t_mean.append(_time(mean, x))
                    t_ref.append(_time(reference, x))
                o, m, r = (statistics.median(t) * 1e3 for t in (t_ours, t_mean, t_ref))
                print(
                    f"| {rule} | {n} | {d:.0e} | {o:.1f} | {m:.1f} | {r:.1f} | {o / r:.2f} | {o / m:.1f} |",
                    flush=True,
                )


# ---- accuracy grid


def problem(
    seed: int, workers: int
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor, torch.Tensor]:
    """A 10-class problem of Gaussian clusters in 32 dimensions, split over workers."""
    g = torch.Generator().manual_seed(1000 + seed)
    centres = torch.randn(10, 32, generator=g) * 0.35  # overlapping: about 85% reachable

    def draw(count: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, 10, (count,), generator=g)
        return centres[y] + torch.randn(count, 32, generator=g), y

    x, y = draw(20_000)
    shards = [(x[i::workers], y[i::workers]) for i in range(workers)]
    test_x, test_y = draw(5_000)
    return shards, test_x, test_y


def train(
    rule: str, attack_name: str, seed: int, *, n: int = 8, f: int = 2, steps: int = 300
) -> float:
    """Test accuracy (%) after ``steps`` of data-parallel SGD with worker momentum."""
    from torch.func import functional_call, grad, vmap

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    shards, test_x, test_y = problem(seed, n)
    agg = aggregator(rule, f)
    bad = list(range(n - f, n)) if attack_name != "none" else []
    cheat = None if attack_name in ("none", "label-flip") else attack(attack_name, n, f)
    size = sum(p.numel() for p in params.values())
    momenta = torch.zeros(n, size)
    g = torch.Generator().manual_seed(seed)
    lr, beta, batch = 0.1, 0.9, 32

    def loss(p: dict[str, torch.Tensor], xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(functional_call(model, p, (xb,)), yb)

    per_worker = vmap(grad(loss), in_dims=(None, 0, 0))  # every worker's gradient at once
    for _ in range(steps):
        picks = [torch.randint(0, len(y), (batch,), generator=g) for _, y in shards]
        xb = torch.stack([x[i] for (x, _), i in zip(shards, picks, strict=True)])
        yb = torch.stack([y[i] for (_, y), i in zip(shards, picks, strict=True)])
        if attack_name == "label-flip":
            yb[bad] = 9 - yb[bad]
        grads = per_worker(params, xb, yb)
        flat = torch.cat([grads[k].reshape(n, -1) for k in params], dim=1)
        momenta.mul_(beta).add_(flat, alpha=1 - beta)
        sent = momenta.clone()
        if cheat is not None:
            honest = momenta[: n - f]
            for w in bad:
                sent[w] = cheat(honest, momenta[w])
        step = agg(sent)
        offset = 0
        for p in params.values():
            p -= lr * step[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
    logits = functional_call(model, params, (test_x,))
    return (logits.argmax(1) == test_y).float().mean().item() * 100


GRID_RULES = (
    "mean",
    "median",
    "trimmed-mean",
    "geometric-median",
    "krum",
    "multi-krum",
    "centered-clipping",
    "nnm+median",
)
GRID_ATTACKS = ("none", "sign-flip", "gaussian", "scaled", "alie", "ipm", "label-flip")


def grid(seeds: int, rules: tuple[str, ...] = GRID_RULES) -> None:
    torch.set_num_threads(1)
    clean = statistics.mean(train("mean", "none", s) for s in range(seeds))
    print(f"clean mean run: {clean:.1f}% test accuracy (n = 8, f = 2 Byzantine where attacked)\n")
    print(f"| rule | {' | '.join(GRID_ATTACKS)} | worst | worst - clean |")
    print(f"| --- | {' | '.join('---' for _ in GRID_ATTACKS)} | --- | --- |")
    for rule in rules:
        row = {a: statistics.mean(train(rule, a, s) for s in range(seeds)) for a in GRID_ATTACKS}
        worst = min(row[a] for a in GRID_ATTACKS if a != "none")
        cells = " | ".join(f"{row[a]:.1f}" for a in GRID_ATTACKS)
        print(f"| {rule} | {cells} | {worst:.1f} | {worst - clean:+.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cost", action="store_true")
    parser.add_argument("--grid", action="store_true")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rules", default=",".join(GRID_RULES), help="the grid's rules")
    args = parser.parse_args()
    both = not (args.cost or args.grid)
    if args.cost or both:
        cost(args.reps)
        print()
    if args.grid or both:
        grid(args.seeds, tuple(args.rules.split(",")))


if __name__ == "__main__":
    main()
