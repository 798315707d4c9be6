"""The gradient rows of a step with a robust aggregator, and an attacker's view of them.

With a robust rule every rank needs every rank's gradient (see
:mod:`ft_notebook.train._robust`): :func:`own_row` is this rank's row of the
``(world, parameters + 1)`` buffer the step all-reduces; :func:`honest_rows` is what
a worker turned bad with an attack that knows the honest gradients (ALIE, IPM)
computes of every other rank's slice, as those ranks compute them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ft_notebook.train.rank._trainer import Trainer


def honest_rows(
    trainer: Trainer, indices: np.ndarray, step: int, rank: int, world: int, parts: int = 0
) -> Any:
    """The mean gradient of every other rank's slice of the step, ``(world - 1, d)``
    in float64, computed here as those ranks compute them (the same slots, seeds
    and order): what an attacker that knows the honest gradients (ALIE, IPM) uses."""
    import torch

    rows = []
    for other in range(world):
        slices = trainer.slices(len(indices), other, world, parts)
        samples = sum(hi - lo for _, lo, hi in slices)
        if other == rank or samples == 0:
            continue
        row = torch.zeros(trainer.numel, dtype=torch.float64, device=trainer.device)
        for slot, lo, hi in slices:
            flat = trainer.flat_gradients()
            trainer.backward(indices[lo:hi], (hi - lo) / samples, step, slot, flat, own=False)
            row += flat[:-1]
        rows.append(row)
    return torch.stack(rows) if rows else None


def own_row(
    trainer: Trainer,
    indices: np.ndarray,
    slices: list[tuple[int, int, int]],
    step: int,
    rank: int,
    world: int,
    honest: Any = None,
    table: Any = None,
) -> Any:
    """A robust aggregator's buffer: this rank's mean gradient over its own samples
    (and its loss) in row ``rank``, zeros in the others' rows; what a bad worker
    sends instead, when this worker was turned bad (``honest``: the others' rows,
    for an attack that needs them). ``table``: the step's BatchNorm statistics."""
    import torch

    from ft_notebook.train._robust import sent

    rows = torch.zeros(world, trainer.numel + 1, dtype=torch.float64, device=trainer.device)
    own = sum(hi - lo for _, lo, hi in slices)
    row = rows[rank]
    for slot, lo, hi in slices:  # in slot order: the same sum wherever it runs
        flat = trainer.flat_gradients()
        stats = None if table is None else table[slot]
        trainer.backward(indices[lo:hi], (hi - lo) / own, step, slot, flat, stats)
        row += flat
    row[:-1] = sent(row[:-1], world, honest)
    return rows
