"""One rank's model, optimizer and data, and the arithmetic of one step.

A step's gradient travels as one flat buffer: the parameters' gradients, each
already weighted by its samples' share of the global batch, then the weighted loss.
Summed over ranks it is the gradient of the mean loss over the global batch, the
same as on one process.

**The sum must not depend on the world size**, or a run that loses a worker ends
somewhere else than one that did not: float32 sums taken in another order differ by
about 1e-7, and training amplifies that (a ReLU whose input sits near zero flips for
one sample, Adam scales a tiny difference up to a full step). Measured on an MLP with
AdamW, fault-free runs on 3, 2 and 1 workers ended 7-14% apart. So the batch is cut
into a fixed number of *parts* (the run's largest world size so far, whatever the
world size now), each part's gradient is computed by one backward pass of its own,
exactly as in a run without failures (a survivor that takes over a lost rank's part
computes it in a pass of its own), and the parts are added in part order, whoever
holds them (:mod:`._ordered_sum`): each rank owns a slice of the buffer, receives
that slice of every part, folds them ``p0 + p1 + p2 ...`` and sends the sum back. A
run that loses and regains workers then sums bit for bit what a run without failures
sums, for the bytes of a float32 all-reduce. ``ft-notebook.train.ordered-sums:
false`` sums one float32 slice per rank by an all-reduce instead (world-size
dependent). With at most two parts (a run that never had more than two workers) the
sum is one rounding of ``p0 + p1`` wherever it is taken, so those runs all-reduce
their float32 gradients in place.

With ``deterministic=True`` the parts are micro-chunks of a fixed size, whatever the
world size and the run's history, summed in chunk order the same way: a run with
failures ends bit-identical to one without, even on kernels that would compute a
part differently in a batch of another size.

On a GPU (NCCL) the parts are not sent point to point yet: they are summed by an
all-reduce of float64 values, exact in any order (:mod:`._allreduce_buffer`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ft_notebook._random import Stream
from ft_notebook.train._sharding import DataCursor, epoch_order, split, split_chunks
from ft_notebook.train.rank._batch_stats import BatchStats
from ft_notebook.train.rank._ordered_sum import Parts
from ft_notebook.train.spec import FitSpec, steps_per_epoch


class Trainer:
    def __init__(self, spec: FitSpec, device: Any) -> None:
        self.spec, self.device = spec, device
        #: This rank's draws from torch's generator, which the worker's threads share
        self.random = Stream(device)
        with self.random.draws(spec.seed):  # the same initial weights on every rank
            data = spec.data
            if callable(data) and not hasattr(data, "__getitem__"):
                data = data()
            model = spec.model()
        self.dataset = data
        self.size = len(data)
        if self.size < 1:
            from ft_notebook.exceptions import TrainingError

            raise TrainingError("The dataset is empty.")
        self.model = model.to(device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = spec.optimizer(self.params)
        self.scheduler = spec.lr_scheduler(self.optimizer) if spec.lr_scheduler else None
        self.numel = sum(p.numel() for p in self.params)
        #: the BatchNorm layers, whose statistics a step applies in part order
        self.batch_stats = BatchStats(self.model)
        #: the newest step's BatchNorm statistics per slot, all-reduced like the
        #: gradients (None: the model has no BatchNorm layer)
        self.stats_table: Any = None
        self.steps_per_epoch = steps_per_epoch(self.size, spec.batch_size)
        self.total_steps = self.steps_per_epoch * spec.epochs
        self._order: tuple[int, np.ndarray] | None = None
        self._flat: Any = None
        #: on a GPU: the float64 sum of this rank's parts, all-reduced
        self.total64: Any = None
        self._spares: list[Any] = []  # rows of this rank's parts but its last
        self._unseeded_next = (-1, -1)
        self._views: list[Any] = []
        #: The newest step's robust aggregate (its suspects), with an aggregator
        self.aggregated: Any = None

    # ---- data

    def cursor(self, step: int) -> DataCursor:
        epoch, k = divmod(step, self.steps_per_epoch)
        return DataCursor(epoch, k * self.spec.batch_size)

    def step_indices(self, step: int) -> np.ndarray:
        """The dataset indices of the whole global batch of ``step``."""
        cursor = self.cursor(step)
        if self._order is None or self._order[0] != cursor.epoch:
            self._order = (cursor.epoch, epoch_order(self.spec.seed, cursor.epoch, self.size))
        order = self._order[1]
        return order[cursor.position : cursor.position + self.spec.batch_size]

    def batch(self, indices: np.ndarray) -> Any:
        import torch
        from torch.utils.data import TensorDataset, default_collate

        if isinstance(self.dataset, TensorDataset):
            idx = torch.from_numpy(indices)
            items: Any = tuple(t[idx] for t in self.dataset.tensors)
        elif hasattr(self.dataset, "__getitems__"):
            items = default_collate(self.dataset.__getitems__(indices.tolist()))
        else:
            items = default_collate([self.dataset[int(i)] for i in indices])
        return _to(items, self.device)

    # ---- one step

    def loss_of(self, batch: Any) -> Any:
        spec = self.spec
        if spec.train_step is not None:
            return spec.train_step(self.model, batch, spec.loss)
        inputs, targets = batch
        return spec.loss(self.model(inputs), targets)  # type: ignore[misc]

    def local_gradients(self, step: int, rank: int, world: int, parts: int = 0) -> Any:
        """This rank's share of ``step``'s gradient (see the module doc): the
        :class:`~._ordered_sum.Parts` to sum in part order, or a buffer to all-reduce.

        ``parts``: how many parts the batch is cut into (the run's largest world size
        so far; 0 or fewer than ``world``: the world size). This rank computes its share of
        them, one backward pass each. A worker turned bad (``%ft chaos byzantine``)
        puts its attack in place of its gradients (:func:`ft_notebook.train._robust.sent`)."""
        from ft_notebook.train._robust import knows_the_honest
        from ft_notebook.train.rank._allreduce_buffer import allreduce_buffer
        from ft_notebook.train.rank._robust_rows import honest_rows, own_row

        indices = self.step_indices(step)
        n = len(indices)
        slices = self.slices(n, rank, world, parts)
        table = self.stats_table = (
            self.batch_stats.table(self.slot_count(n, world, parts), self.device)
            if self.batch_stats
            else None
        )
        # first: the plain path's own buffer is the gradient views these passes reuse
        honest = None
        if knows_the_honest():
            honest = honest_rows(self, indices, step, rank, world, parts)
        if self.spec.aggregator is not None:
            return own_row(self, indices, slices, step, rank, world, honest, table)
        if self.device.type == "cpu" and (
            self.spec.deterministic or (self.spec.ordered_sums and max(parts, world) > 2)
        ):
            return self._parts(indices, slices, step, world, parts, honest, table)
        return allreduce_buffer(self, indices, slices, step, world, parts, honest, table)

    def _parts(
        self,
        indices: np.ndarray,
        slices: list[tuple[int, int, int]],
        step: int,
        world: int,
        parts: int,
        honest: Any,
        table: Any,
    ) -> Parts:
        """One float32 row per part of this rank, each from a backward pass of its own:
        the last into the flat buffer the sum lands in, the others into rows of their
        own (a rank that took over a lost rank's part)."""
        n = len(indices)
        owners = [[slot for slot, _, _ in self.slices(n, r, world, parts)] for r in range(world)]
        rows: dict[int, Any] = {}
        for i, (slot, lo, hi) in enumerate(slices):
            row = self.flat_buffer() if i == len(slices) - 1 else self._spare(i)
            self.backward(
                indices[lo:hi], (hi - lo) / n, step, slot, row, _row(table, slot), overwrite=True
            )
            _attack(row, world, honest, (hi - lo) / n)
            rows[slot] = row
        return Parts(rows, owners, self._flat if rows else self.flat_gradients())

    def _spare(self, i: int) -> Any:
        """The row of this rank's ``i``-th part (one that is not its last)."""
        import torch

        dtype = self.params[0].dtype if self.params else torch.float32  # as the views'
        while len(self._spares) <= i:
            self._spares.append(torch.empty(self.numel + 1, dtype=dtype, device=self.device))
        return self._spares[i]  # written whole by the pass

    def slices(self, n: int, rank: int, world: int, parts: int = 0) -> list[tuple[int, int, int]]:
        """(slot, start, stop) of the ``n`` samples of a step that ``rank`` of ``world``
        computes, non-empty, in order. A slot is what its gradient is seeded and
        summed by: a fixed-size chunk (deterministic), a part of the batch cut into
        ``max(parts, world)`` (ordered sums), or the rank itself (plain float32).
        Over the ranks of a world, the slices cover the step's samples exactly once."""
        if self.spec.deterministic:
            bounds = split_chunks(n, self.spec.chunk)
            first, stop = split(len(bounds), world)[rank]
            return [(c, *bounds[c]) for c in range(first, stop)]
        if not self.spec.ordered_sums:
            lo, hi = split(n, world)[rank]
            return [(rank, lo, hi)] if hi > lo else []
        parts = max(parts, world)
        bounds = split(n, parts)
        first, stop = split(parts, world)[rank]
        return [(p, *bounds[p]) for p in range(first, stop) if bounds[p][1] > bounds[p][0]]

    def slot_count(self, n: int, world: int, parts: int = 0) -> int:
        """How many slots :meth:`slices` numbers the ``n`` samples of a step into."""
        if self.spec.deterministic:
            return len(split_chunks(n, self.spec.chunk))
        if not self.spec.ordered_sums:
            return world
        return max(parts, world)

    def flat_gradients(self) -> Any:
        """The zeroed flat buffer, with every parameter's ``.grad`` a view into it.

        Backward then accumulates straight into the buffer that is all-reduced, and
        the reduced sum is the gradient the optimizer reads: no copies either way
        (DDP's ``gradient_as_bucket_view``)."""
        flat = self.flat_buffer().zero_()
        for p, view in zip(self.params, self._views, strict=True):
            p.grad = view
        return flat

    def flat_buffer(self) -> Any:
        """The flat buffer the step's summed gradient lands in (as it is: a pass that
        writes it whole need not zero it first), and the parameters' views into it."""
        import torch

        if self._flat is None:
            dtype = self.params[0].dtype if self.params else torch.float32
            self._flat = torch.zeros(self.numel + 1, dtype=dtype, device=self.device)
            self._views, offset = [], 0
            for p in self.params:
                self._views.append(self._flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        return self._flat

    def backward(
        self,
        indices: np.ndarray,
        weight: float,
        step: int,
        key: int,
        out: Any,
        stats: Any = None,
        *,
        own: bool = True,
        overwrite: bool = False,
    ) -> None:
        """One part's backward pass into ``out``; its BatchNorm statistics into the
        row ``stats``. ``own``: False for a pass computed for another rank's sake
        (an attack that knows the honest gradients), which records nothing.

        Into the gradient views (``out`` is the flat buffer) the pass accumulates,
        unless ``overwrite``; anywhere else, and with ``overwrite``, autograd makes
        fresh gradients and they are copied over ``out`` (a parameter the pass did
        not reach gets zeros): one pass over the buffer, where zeroing it and
        accumulating into it takes two and a half."""
        import torch

        # dropout and other randomness: keyed by step and chunk or part, not by rank
        # (a survivor that takes over a part draws what its owner would have);
        # without ordered sums, seeded (0.06 ms) only when the rank or the step
        # sequence changes, which keeps ranks apart
        reseed = self.spec.deterministic or self.spec.ordered_sums
        seed = None  # go on with this rank's own stream
        if reseed or (key, step) != self._unseeded_next:
            seed = (self.spec.seed * 1_000_003 + step) * 4099 + key
        self._unseeded_next = (key, step + 1)
        into_views = out is self._flat and not overwrite
        if not into_views:
            for p in self.params:
                p.grad = None
        amp = self.spec.amp and self.device.type == "cuda"
        # the forward pass draws (dropout, augmentations); the backward replays its masks
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=amp)
        with self.random.draws(seed), autocast, self.batch_stats.forward(stats, own=own):
            loss = self.loss_of(self.batch(indices))
        (loss * weight).backward()
        offset = 0
        for i, p in enumerate(self.params):
            k = p.numel()
            # a gradient autograd did not accumulate in place (another layout): copy it
            if p.grad is not None and not (into_views and p.grad is self._views[i]):
                out[offset : offset + k].copy_(p.grad.reshape(-1))
            elif p.grad is None and not into_views:
                out[offset : offset + k].zero_()
            offset += k
        out[offset] = float(loss.detach()) * weight

    def reduce_rows(self, buffer: Any) -> Any:
        """The summed gradient: rows added in chunk order (deterministic), the robust
        rule over the ranks' rows (an aggregator), or as is."""
        if self.spec.aggregator is not None:
            from ft_notebook.train._robust import aggregate

            self.aggregated = aggregate(self.spec.aggregator, buffer, self.spec.on_violation)
            return self.aggregated.total
        if buffer.dim() == 1:
            return buffer
        total = buffer[0].clone()
        for row in buffer[1:]:
            total += row
        return total

    def apply(self, total: Any, stats: Any = None) -> tuple[float, bool]:
        """Apply the summed gradient and the step's reduced BatchNorm statistics
        (``stats``); returns (global mean loss, whether it was finite). A non-finite
        step changes nothing, its statistics included."""
        import torch

        loss = float(total[-1])
        # one cheap pass: a NaN or Inf anywhere makes the sum non-finite; a sum that
        # overflowed from finite values is told apart by the full check
        if not math.isfinite(float(total.sum())) and not bool(torch.isfinite(total).all()):
            return loss, False
        if total is self.total64:  # float64 sums on a GPU: rounded once, into the views
            if self._flat is None:  # every part of this rank was empty (a short last batch)
                self.flat_gradients()
            self._flat.copy_(total)
        if total is self.total64 or total is self._flat:
            for p, view in zip(self.params, self._views, strict=True):
                p.grad = view  # autograd may have swapped one out (another layout)
        else:  # deterministic rows on a GPU: the sum is a new tensor
            offset = 0
            for p in self.params:
                k = p.numel()
                p.grad = total[offset : offset + k].view_as(p).to(p.dtype)
                offset += k
        if self.spec.clip_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.params, self.spec.clip_grad_norm)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        if stats is not None:
            self.batch_stats.apply(stats)
        return loss, True

    # ---- state

    def state(self) -> dict[str, Any]:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.scheduler is not None:
            state["lr_scheduler"] = self.scheduler.state_dict()
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and "lr_scheduler" in state:
            self.scheduler.load_state_dict(state["lr_scheduler"])

    def drop_buffers(self) -> None:
        """Forget the gradient buffers: an abandoned collective (a newer plan, a
        failed peer) may still complete into one, so it must never be reused."""
        self._flat = self.total64 = self.stats_table = None
        self._spares = []


def _attack(row: Any, world: int, honest: Any, share: float) -> None:
    """Put a bad worker's attack in place of the gradient in ``row`` (in place)."""
    from ft_notebook.train._robust import sent

    own = row[:-1]
    made = sent(own, world, honest, share)
    if made is not own:  # an honest worker's row stays as it is, with no copy
        own.copy_(made)


def _row(table: Any, slot: int) -> Any:
    return None if table is None else table[slot]


def _to(items: Any, device: Any) -> Any:
    if hasattr(items, "to"):
        return items.to(device, non_blocking=True)
    if isinstance(items, (list, tuple)):
        return type(items)(_to(x, device) for x in items)
    if isinstance(items, dict):
        return {k: _to(v, device) for k, v in items.items()}
    return items
