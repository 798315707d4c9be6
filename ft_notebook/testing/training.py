"""Models and data for training drills, built so that faults show in the parameters.

:func:`counting_problem`: a "model" with one parameter per sample, trained so that
every use of a sample adds exactly 1.0 to its parameter (the batch is a power of two
and each sample's gradient lands in its own element, so every sum is exact). After
``e`` epochs every parameter is ``e`` if and only if every sample was used exactly
once per epoch: a lost sample shows as ``e - 1``, a sample used twice as ``e + 1``.
The count is taken by the data plane itself (gradients through the real all-reduce).

:func:`regression_problem`: a small MLP without batch norm on a fixed random linear
task, for comparing a run with failures against one without.

Every piece is a module-level function or ``functools.partial`` of one, so it
travels to workers by reference.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import Dataset


class CountingModel(torch.nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.counts = torch.nn.Parameter(torch.zeros(size, dtype=torch.float64))

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        return self.counts[index]


def negative_mean(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return -output.mean() + 0 * target.sum()  # a NaN target poisons the step


class PacedDataset(Dataset):  # type: ignore[type-arg]
    """Tensors whose batches take ``delay_s`` to fetch: steps of a known length, so a
    fault can be injected at a chosen step even on a fast machine."""

    def __init__(
        self,
        *tensors: torch.Tensor,
        delay_s: float = 0.0,
        slow: dict[int, float] | None = None,
        slow_once: str | None = None,
        slow_once_each: str | None = None,
    ) -> None:
        self.tensors, self.delay_s = tensors, delay_s
        self.slow = slow or {}  # sample index -> extra seconds whenever it is fetched
        #: A file: the first process to fetch a slow sample creates it and is slow;
        #: everyone after is not (a hang of one worker, not a poisoned sample).
        self.slow_once = slow_once
        #: A folder: the same for each slow sample on its own (the first fetch of
        #: sample i creates ``<folder>/<i>`` and is slow), to place several faults.
        self.slow_once_each = slow_once_each

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, ...]]:
        if self.slow_once_each is not None:
            extra = sum(self._first_fetch(i) for i in indices if i in self.slow)
        else:
            extra = sum(self.slow.get(i, 0.0) for i in indices)
        if extra and self.slow_once is not None:
            try:
                open(self.slow_once, "x").close()
            except FileExistsError:
                extra = 0.0
        delay = self.delay_s + extra
        if delay:
            time.sleep(delay)
        return [self[i] for i in indices]

    def _first_fetch(self, index: int) -> float:
        """The slow sample's extra seconds if this is its first fetch, else 0."""
        try:
            open(f"{self.slow_once_each}/{index}", "x").close()
        except FileExistsError:
            return 0.0
        return self.slow[index]


def counting_problem(
    size: int = 256,
    batch: int = 32,
    delay_s: float = 0.0,
    slow: dict[int, float] | None = None,
    nonfinite: tuple[int, ...] = (),
) -> dict[str, Any]:
    """Keyword arguments for ``ft.fit`` (model, data, optimizer, loss, batch_size).

    ``nonfinite``: samples whose target is NaN, which makes their step's loss NaN.
    """
    if size % batch or batch & (batch - 1):
        raise ValueError("size must be a multiple of batch, and batch a power of two")
    targets = torch.zeros(size, dtype=torch.float64)
    targets[list(nonfinite)] = float("nan")
    data = PacedDataset(torch.arange(size), targets, delay_s=delay_s, slow=slow)
    return {
        "model": functools.partial(CountingModel, size),
        "data": data,
        "optimizer": functools.partial(torch.optim.SGD, lr=float(batch)),
        "loss": negative_mean,
        "batch_size": batch,
    }


def mlp(
    features: int = 16, hidden: int = 64, dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(features, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
    ).to(dtype)


def regression_problem(
    size: int = 512,
    batch: int = 32,
    features: int = 16,
    hidden: int = 64,
    delay_s: float = 0.0,
    dtype: torch.dtype = torch.float32,
) -> dict[str, Any]:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(size, features, generator=g, dtype=dtype)
    w = torch.randn(features, 1, generator=g, dtype=dtype)
    y = x @ w + 0.1 * torch.randn(size, 1, generator=g, dtype=dtype)
    return {
        "model": functools.partial(mlp, features, hidden, dtype),
        "data": PacedDataset(x, y, delay_s=delay_s),
        "optimizer": functools.partial(torch.optim.Adam, lr=1e-2),
        "loss": torch.nn.functional.mse_loss,
        "batch_size": batch,
    }


def scale_mlp(hidden: int, features: int = 32, outputs: int = 4) -> torch.nn.Module:
    """``features``-H-H-``outputs`` with ReLU: about H**2 parameters (0.28 M at H=512,
    4.3 M at 2048, 17 M at 4096, 67 M at 8192), the scale benchmark's model."""
    return torch.nn.Sequential(
        torch.nn.Linear(features, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, outputs),
    )


def scale_problem(hidden: int, size: int = 960, batch: int = 96) -> dict[str, Any]:
    """``ft.fit``'s arguments for :func:`scale_mlp` with AdamW on a random regression
    (32 features, 4 targets): the same tensors wherever it is built."""
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(1234)
    x = torch.randn(size, 32, generator=g)
    y = x @ torch.randn(32, 4, generator=g) + 0.1 * torch.randn(size, 4, generator=g)
    return {
        "model": functools.partial(scale_mlp, hidden),
        "data": TensorDataset(x, y),
        "optimizer": functools.partial(torch.optim.AdamW, lr=1e-3),
        "loss": torch.nn.functional.mse_loss,
        "batch_size": batch,
    }


def held_while(hold: str, factory: Callable[[], Any]) -> Any:
    """``factory()`` once the file ``hold`` is gone (at most 2 minutes): a test holds
    the workers that restart meanwhile, whose warm-up builds the model, out of a run
    until it lets them (on a fast machine they rejoined a short run before it ended)."""
    deadline = time.monotonic() + 120
    while os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(0.02)
    return factory()


def batchnorm_mlp() -> torch.nn.Module:
    """8-16-2 with one BatchNorm1d: running statistics a lost worker must not move."""
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
    )


def batchnorm_problem(size: int = 960, batch: int = 96, delay_s: float = 0.0) -> dict[str, Any]:
    """A classification with BatchNorm and plain SGD (60 steps in 6 epochs)."""
    g = torch.Generator().manual_seed(4321)
    x = torch.randn(size, 8, generator=g) * 2 + 0.5
    y = (x[:, 0] > x[:, 1]).long()
    return {
        "model": batchnorm_mlp,
        "data": PacedDataset(x, y, delay_s=delay_s),
        "optimizer": functools.partial(torch.optim.SGD, lr=0.1),
        "loss": torch.nn.functional.cross_entropy,
        "batch_size": batch,
    }


# ---- a problem with an accuracy to lose: handwritten digits


def digits_mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def digits_adam(params: Any) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=3e-3)


def digits_problem(seed: int = 0) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor]:
    """``ft.fit`` keywords for scikit-learn's handwritten digits (8x8, 10 classes,
    shipped with scikit-learn), standardized, an MLP 64-64-10 with Adam: 1,500 images
    to train on, batches of 128; and the 297 left out (inputs, labels) to test on."""
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]

    x_np, y_np = load_digits(return_X_y=True)
    x = torch.tensor(x_np, dtype=torch.float32)
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    y = torch.tensor(y_np)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    train, test = order[:1500], order[1500:]
    problem = {
        "model": digits_mlp,
        "data": torch.utils.data.TensorDataset(x[train], y[train]),
        "optimizer": digits_adam,
        "loss": torch.nn.functional.cross_entropy,
        "batch_size": 128,
        "seed": seed,
    }
    return problem, x[test], y[test]


def accuracy_of(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """The share of ``x`` that ``model`` labels as ``y``."""
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())
