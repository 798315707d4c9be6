"""The realistic models of the chaos drills: what people train, not our fixtures.

- ``cnn``: a small CNN with BatchNorm and dropout on scikit-learn's handwritten digits
  (8x8, shipped with the package), each image drawn with a random shift and noise
  inside the dataset (random augmentation), so the drills check buffers and
  randomness as well as parameters;
- ``transformer``: a two-layer causal transformer (dropout, a causal mask) predicting
  the next byte of a text read from disk on the worker (a file of Python's own
  standard library, present wherever Python is).

Both train with AdamW, a learning-rate schedule, gradient clipping and an ``eval_fn``
(accuracy on digits held out; loss on the last tenth of the text), and carry the
drills' counter per sample (:class:`~ft_notebook.testing.training_chaos.DrillModel`):
the schedule keeps the counters' learning rate at 1, and clipping scales a counter's
gradient without changing its sign, which is all its update reads.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ft_notebook.testing.training import PacedDataset

#: What the learning rate of the trained weights decays by over a drill's 256 steps.
_DECAY_STEPS = 256.0


def _constant(step: int) -> float:
    return 1.0


def _cosine(step: int) -> float:
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(step, _DECAY_STEPS) / _DECAY_STEPS))


def drill_scheduler(optimizer: torch.optim.Optimizer) -> Any:
    """Cosine decay for the weights; the sample counters (group 0) keep lr 1."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, [_constant, _cosine])


# ---- the CNN on digits


def digits_cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Dropout(0.2),
        torch.nn.Linear(16 * 4 * 4, 10),
    )


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]

    x_np, y_np = load_digits(return_X_y=True)
    x = torch.tensor(x_np, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0
    return (x - 0.3) / 0.4, torch.tensor(y_np)


#: Digits held out for the evaluation (the first ones of a fixed permutation).
_HELD_OUT = 297


class AugmentedDigits(PacedDataset):
    """``samples`` draws of the training digits (repeated), each shifted by up to one
    pixel and given a little noise, drawn from torch's generator when fetched."""

    def __init__(self, samples: int, delay_s: float = 0.0) -> None:
        x, y = _digits()
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
        train = order[_HELD_OUT:]
        pick = train[torch.arange(samples) % len(train)]
        super().__init__(x[pick], y[pick], torch.arange(samples), delay_s=delay_s)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        image, label, i = super().__getitem__(index)
        dx, dy = (int(v) for v in torch.randint(-1, 2, (2,)))
        image = torch.roll(image, shifts=(dy, dx), dims=(1, 2))
        return image + 0.05 * torch.randn(image.shape), label, i


def digits_accuracy(model: Any) -> dict[str, float]:
    """Accuracy on the held-out digits (an ``eval_fn``; the model in eval mode)."""
    x, y = _digits()
    held = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))[:_HELD_OUT]
    net = getattr(model, "net", model)
    was = net.training
    net.eval()
    with torch.no_grad():
        accuracy = float((net(x[held]).argmax(1) == y[held]).float().mean())
    net.train(was)
    return {"accuracy": accuracy}


# ---- the causal transformer on text from disk

#: Context length, bytes.
CONTEXT = 32


def text_path() -> str:
    """A text every Python has on disk: the standard library's argparse module."""
    import argparse

    return str(inspect.getsourcefile(argparse))


class CausalTransformer(torch.nn.Module):
    """Bytes in, next-byte logits out: embeddings, 2 pre-norm layers with a causal
    mask and dropout, a linear head."""

    def __init__(self, d: int = 32, heads: int = 2, layers: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(256, d)
        self.position = torch.nn.Parameter(torch.zeros(CONTEXT, d))
        layer = torch.nn.TransformerEncoderLayer(
            d, heads, 4 * d, dropout, batch_first=True, norm_first=True
        )
        self.blocks = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, 256)
        self.register_buffer(
            "causal",
            torch.nn.Transformer.generate_square_subsequent_mask(CONTEXT),
            persistent=False,
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        h = self.embed(tokens) + self.position[:t]
        causal: torch.Tensor = self.causal  # type: ignore[assignment]
        h = self.blocks(h, mask=causal[:t, :t], is_causal=True)
        out: torch.Tensor = self.head(self.norm(h))
        return out


class TextWindows(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``samples`` windows of ``CONTEXT + 1`` bytes of the file at ``path``, read on
    first use (on the worker), spread evenly over its first nine tenths; items are
    (input bytes, next bytes, sample index)."""

    def __init__(self, path: str, samples: int, delay_s: float = 0.0) -> None:
        self.path, self.samples, self.delay_s = path, samples, delay_s
        self._text: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.samples

    def text(self) -> torch.Tensor:
        if self._text is None:
            data = Path(self.path).read_bytes()
            self._text = torch.tensor(list(data), dtype=torch.long)
        return self._text

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        text = self.text()
        span = len(text) * 9 // 10 - CONTEXT - 1
        start = index * span // self.samples
        window = text[start : start + CONTEXT + 1]
        return window[:-1], window[1:], torch.tensor(index)

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, ...]]:
        if self.delay_s:
            import time

            time.sleep(self.delay_s)
        return [self[i] for i in indices]


def text_loss(model: Any) -> dict[str, float]:
    """Next-byte loss on the text's last tenth (an ``eval_fn``)."""
    text = TextWindows(text_path(), 1).text()
    tail = text[len(text) * 9 // 10 :]
    n = (len(tail) - 1) // CONTEXT
    x = tail[: n * CONTEXT].view(n, CONTEXT)
    y = tail[1 : n * CONTEXT + 1].view(n, CONTEXT)
    net = getattr(model, "net", model)
    was = net.training
    net.eval()
    with torch.no_grad():
        loss = float(torch.nn.functional.cross_entropy(net(x).reshape(-1, 256), y.reshape(-1)))
    net.train(was)
    return {"loss": loss}


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
    )


# ---- as fit's keywords


def realistic_problem(kind: str, samples: int, delay_s: float) -> dict[str, Any]:
    """``ft.fit`` keywords of the ``cnn`` or ``transformer`` drill problem, the model
    wrapped with a counter per sample (the caller's ``DrillModel``)."""
    from ft_notebook.testing.training_chaos import DrillModel, drill_optimizer, drill_step

    net: Callable[[], torch.nn.Module]
    data: Any
    loss: Callable[..., torch.Tensor]
    evaluate: Callable[[Any], dict[str, float]]
    if kind == "cnn":
        net, data, loss, evaluate = (
            digits_cnn,
            AugmentedDigits(samples, delay_s),
            torch.nn.functional.cross_entropy,
            digits_accuracy,
        )
    elif kind == "transformer":
        net, data, loss, evaluate = (
            CausalTransformer,
            TextWindows(text_path(), samples, delay_s),
            sequence_loss,
            text_loss,
        )
    else:
        raise ValueError(f"no drill model {kind!r}: 'mlp', 'cnn' or 'transformer'")
    return {
        "model": functools.partial(DrillModel, samples, net=net),
        "data": data,
        "optimizer": drill_optimizer,
        "lr_scheduler": drill_scheduler,
        "clip_grad_norm": 1.0,
        "loss": loss,
        "train_step": drill_step,
        "eval_fn": evaluate,
        "eval_every": 64,
        "batch_size": 96,
    }
