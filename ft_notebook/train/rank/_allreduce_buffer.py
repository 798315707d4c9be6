"""A step's gradient buffer where it is all-reduced rather than summed in part order.

On a GPU the parts are not sent point to point yet (NCCL's sends would need grouping
this code does not do): their sum is taken by an all-reduce of float64 values, which
adds exactly in any order (one float64 row per chunk with ``deterministic=True``; one
float64 sum of this rank's parts otherwise). With at most two parts, or
``ordered-sums: false``, the buffer is the float32 gradient itself, accumulated in
place. On a CPU with more parts, :mod:`._ordered_sum` sums them instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ft_notebook.train._sharding import split_chunks

if TYPE_CHECKING:
    from ft_notebook.train.rank._trainer import Trainer


def _row(table: Any, slot: int) -> Any:
    return None if table is None else table[slot]


def allreduce_buffer(
    trainer: Trainer,
    indices: np.ndarray,
    slices: list[tuple[int, int, int]],
    step: int,
    world: int,
    parts: int,
    honest: Any,
    table: Any,
) -> Any:
    """The buffer to all-reduce where parts are not summed in part order: on a GPU
    (NCCL, whose point-to-point this does not use yet: float64 rows or sums, exact
    in any order), or with at most two parts or ``ordered-sums: false`` (float32)."""
    import torch

    from ft_notebook.train._robust import sent

    n = len(indices)
    share = sum(hi - lo for _, lo, hi in slices) / n
    if trainer.spec.deterministic:
        chunks = len(split_chunks(n, trainer.spec.chunk))
        rows = torch.zeros(chunks, trainer.numel + 1, dtype=torch.float64, device=trainer.device)
        for c, lo, hi in slices:
            trainer.backward(indices[lo:hi], (hi - lo) / n, step, c, rows[c], _row(table, c))
            rows[c, :-1] = sent(rows[c, :-1], world, honest, (hi - lo) / n)
        return rows
    if not trainer.spec.ordered_sums or max(parts, world) <= 2:
        # float32, accumulated in place: with at most two parts the sum is one
        # rounding of p0 + p1 wherever it is taken (one rank's two backward passes
        # or a two-rank all-reduce), the part-order sum bit for bit
        flat = trainer.flat_gradients()
        loss = 0.0
        for slot, lo, hi in slices:
            trainer.backward(indices[lo:hi], (hi - lo) / n, step, slot, flat, _row(table, slot))
            loss += float(flat[-1])  # each pass writes its own weighted loss there
        flat[-1] = loss
        flat[:-1] = sent(flat[:-1], world, honest, share)
        return flat
    if trainer.total64 is None:  # the float64 buffer the parts are summed in, all-reduced
        trainer.total64 = torch.empty(trainer.numel + 1, dtype=torch.float64, device=trainer.device)
    total, written = trainer.total64, False
    for part, lo, hi in slices:
        flat = trainer.flat_gradients()
        trainer.backward(indices[lo:hi], (hi - lo) / n, step, part, flat, _row(table, part))
        if written:
            total += flat
        else:
            total.copy_(flat)  # float32 -> float64, exactly; no zeroing pass first
            written = True
    if not written:  # every part of this rank was empty (a short last batch)
        total.zero_()
    total[:-1] = sent(total[:-1], world, honest, share)
    return total
