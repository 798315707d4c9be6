"""What a Byzantine worker sends instead of its gradient, for tests and drills.

Each attack takes the honest workers' gradients of the step (``(h, d)``; an attacker
that knows them is the strong threat model of ALIE and IPM) and the attacker's own
honest gradient, and returns the vector it sends. Label flip is a data attack: the
trainer flips the attacker's labels, and the gradient it sends is honest for them.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import NormalDist

import torch

from ft_notebook.exceptions import AggregationError

Attack = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def sign_flip(scale: float = 4.0) -> Attack:
    """Its own gradient, reversed and ``scale`` times as long. Reversed alone, f < n/2
    attackers only slow the mean down ((n - 2f)/n of the step remains); at 4 times, one
    of 4 turns it around, which is the attack the robust rules are there to stop."""
    return lambda honest, own: -scale * own


def scaled(factor: float = -10.0) -> Attack:
    """Its own gradient times ``factor``."""
    return lambda honest, own: own * factor


def gaussian(std: float = 200.0, seed: int = 0) -> Attack:
    """Noise of standard deviation ``std``, drawn from a generator of its own."""
    generator = torch.Generator().manual_seed(seed)

    def attack(honest: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(own.shape, generator=generator, dtype=own.dtype)
        return noise.to(own.device) * std

    return attack


def alie(n: int, f: int, z: float | None = None) -> Attack:
    """A Little Is Enough (Baruch et al., 2019): the honest mean moved by ``z`` standard
    deviations per coordinate. By default z is the paper's, the largest that still
    looks honest to a majority; it is 0 (no attack) for n = 4, f = 1, where ByzFL's
    default factor of 1.5 is the usual choice."""
    if not 0 < f < n:
        raise AggregationError(f"ALIE needs 0 < f < n, got n={n}, f={f}.")
    if z is None:
        s = n // 2 + 1 - f
        z = NormalDist().inv_cdf((n - s) / n) if s < n else 0.0
    shift = float(z)

    def attack(honest: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
        return honest.mean(dim=0) - shift * honest.std(dim=0, unbiased=honest.shape[0] > 1)

    return attack


def inner_product_manipulation(epsilon: float = 0.1) -> Attack:
    """IPM (Xie et al., 2020): −ε times the honest mean, so that the aggregate's inner
    product with the true gradient turns negative."""
    return lambda honest, own: -epsilon * honest.mean(dim=0)


def bit_flip(own: torch.Tensor, bit: int = 30, every: int = 97) -> torch.Tensor:
    """Flip one bit of every ``every``-th float32 element (bit 30: the exponent's top
    bit, a value near 1 becomes about 1e38): a memory or GPU fault."""
    if own.dtype != torch.float32:
        raise AggregationError(f"bit_flip works on float32 gradients, got {own.dtype}.")
    out = own.clone()
    flat = out.view(-1).view(torch.int32)
    flat[::every] ^= 1 << bit
    return out


ATTACKS = ("sign-flip", "gaussian", "scaled", "alie", "ipm", "label-flip", "bit-flip", "nan")


def attack(name: str, n: int, f: int, **params: float) -> Attack:
    """The attack called ``name`` for ``f`` attackers among ``n`` workers."""
    if name == "sign-flip":
        return sign_flip(**params)
    if name == "gaussian":
        return gaussian(**params)  # type: ignore[arg-type]
    if name == "scaled":
        return scaled(**params)
    if name == "alie":
        return alie(n, f, **params)
    if name == "ipm":
        return inner_product_manipulation(**params)
    if name == "bit-flip":
        return lambda honest, own: bit_flip(own)
    if name == "nan":
        return lambda honest, own: torch.full_like(own, float("nan"))
    if name == "label-flip":
        raise AggregationError(
            "label-flip is a data attack: the trainer flips the attacker's labels (y -> C - 1 - y) "
            "and sends the gradient of that data; it has no gradient function."
        )
    raise AggregationError(f"unknown attack {name!r}; known: {', '.join(ATTACKS)}.")
