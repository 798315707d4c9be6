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
world size now), each part's gradient is computed by one backward pass of its own, exactly as
in a run without failures, and the parts are summed in float64: a sum of a few
float32 values in float64 is exact, or off by far less than float32 resolves, in any
order. A survivor that takes over a lost rank's part computes it in a backward pass
of its own. The cost: a float64 buffer beside the gradients (8 bytes per parameter)
and twice the bytes in the all-reduce; ``ft-notebook.train.float64-sums: false``
trades the invariance for them. With at most two parts (a run that never had more
than two workers) it costs nothing: a float32 sum of two values is rounded once
whoever adds them and in either order, which is what the float64 path gives, so
those runs sum in float32 in place.

With ``deterministic=True`` the buffer has one row per micro-chunk of the step (a
fixed size, whatever the world size): each rank fills the rows of its chunks and
leaves the others zero, so the sum over ranks adds each value to zeros only, which
is exact in any order, and the rows are then added in chunk order on every rank. A
run with failures then ends bit-identical to one without.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ft_notebook._random import Stream
from ft_notebook.train._sharding import DataCursor, epoch_order, split, split_chunks
from ft_notebook.train.rank._batch_stats import BatchStats
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
        self._total: Any = None  # the float64 sum of this rank's parts (float64_sums)
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
        """This rank's weighted gradient buffer of ``step`` (see the module doc).

        ``parts``: how many parts the batch is cut into (the run's largest world size
        so far; 0 or fewer than ``world``: the world size). This rank computes its share of
        them, one backward pass each. A worker turned bad (``%ft chaos byzantine``)
        puts its attack in place of its gradients (:func:`ft_notebook.train._robust.sent`)."""
        import torch

        from ft_notebook.train._robust import knows_the_honest, sent

        indices = self.step_indices(step)
        n = len(indices)
        slices = self.slices(n, rank, world, parts)
        table = self.stats_table = (
            self.batch_stats.table(self.slot_count(n, world, parts), self.device)
            if self.batch_stats
            else None
        )
        # first: the plain path's own buffer is the gradient views these passes reuse
        honest = self.honest_rows(indices, step, rank, world, parts) if knows_the_honest() else None
        if self.spec.aggregator is not None:
            return self._own_row(indices, slices, step, rank, world, honest, table)
        share = sum(hi - lo for _, lo, hi in slices) / n
        if self.spec.deterministic:
            chunks = len(split_chunks(n, self.spec.chunk))
            rows = torch.zeros(chunks, self.numel + 1, dtype=torch.float64, device=self.device)
            for c, lo, hi in slices:
                self._backward(indices[lo:hi], (hi - lo) / n, step, c, rows[c], _row(table, c))
                rows[c, :-1] = sent(rows[c, :-1], world, honest, (hi - lo) / n)
            return rows
        if not self.spec.float64_sums or max(parts, world) <= 2:
            # float32, accumulated in place: with at most two parts the sum is one
            # rounding of p0 + p1 wherever it is taken (one rank's two backward passes
            # or a two-rank all-reduce), the float64 path's result bit for bit, at
            # half its all-reduce bytes and without its two copies
            flat = self._flat_gradients()
            loss = 0.0
            for slot, lo, hi in slices:
                self._backward(indices[lo:hi], (hi - lo) / n, step, slot, flat, _row(table, slot))
                loss += float(flat[-1])  # each pass writes its own weighted loss there
            flat[-1] = loss
            flat[:-1] = sent(flat[:-1], world, honest, share)
            return flat
        if self._total is None:  # the float64 buffer the parts are summed in, all-reduced
            self._total = torch.empty(self.numel + 1, dtype=torch.float64, device=self.device)
        total, written = self._total, False
        for part, lo, hi in slices:
            flat = self._flat_gradients()
            self._backward(indices[lo:hi], (hi - lo) / n, step, part, flat, _row(table, part))
            if written:
                total += flat
            else:
                total.copy_(flat)  # float32 -> float64, exactly; no zeroing pass first
                written = True
        if not written:  # every part of this rank was empty (a short last batch)
            total.zero_()
        total[:-1] = sent(total[:-1], world, honest, share)
        return total

    def honest_rows(
        self, indices: np.ndarray, step: int, rank: int, world: int, parts: int = 0
    ) -> Any:
        """The mean gradient of every other rank's slice of the step, ``(world - 1, d)``
        in float64, computed here as those ranks compute them (the same slots, seeds
        and order): what an attacker that knows the honest gradients (ALIE, IPM) uses."""
        import torch

        rows = []
        for other in range(world):
            slices = self.slices(len(indices), other, world, parts)
            samples = sum(hi - lo for _, lo, hi in slices)
            if other == rank or samples == 0:
                continue
            row = torch.zeros(self.numel, dtype=torch.float64, device=self.device)
            for slot, lo, hi in slices:
                flat = self._flat_gradients()
                self._backward(indices[lo:hi], (hi - lo) / samples, step, slot, flat, own=False)
                row += flat[:-1]
            rows.append(row)
        return torch.stack(rows) if rows else None

    def _own_row(
        self,
        indices: np.ndarray,
        slices: list[tuple[int, int, int]],
        step: int,
        rank: int,
        world: int,
        honest: Any = None,
        table: Any = None,
    ) -> Any:
        """A robust aggregator's buffer (see :mod:`ft_notebook.train._robust`): this
        rank's mean gradient over its own samples (and its loss) in row ``rank``, zeros
        in the others' rows; what a bad worker sends instead, when this worker was
        turned bad (``honest``: the others' rows, for an attack that needs them)."""
        import torch

        from ft_notebook.train._robust import sent

        rows = torch.zeros(world, self.numel + 1, dtype=torch.float64, device=self.device)
        own = sum(hi - lo for _, lo, hi in slices)
        row = rows[rank]
        for slot, lo, hi in slices:  # in slot order: the same sum wherever it runs
            flat = self._flat_gradients()
            self._backward(indices[lo:hi], (hi - lo) / own, step, slot, flat, _row(table, slot))
            row += flat
        row[:-1] = sent(row[:-1], world, honest)
        return rows

    def slices(self, n: int, rank: int, world: int, parts: int = 0) -> list[tuple[int, int, int]]:
        """(slot, start, stop) of the ``n`` samples of a step that ``rank`` of ``world``
        computes, non-empty, in order. A slot is what its gradient is seeded and
        summed by: a fixed-size chunk (deterministic), a part of the batch cut into
        ``max(parts, world)`` (float64 sums), or the rank itself (plain float32).
        Over the ranks of a world, the slices cover the step's samples exactly once."""
        if self.spec.deterministic:
            bounds = split_chunks(n, self.spec.chunk)
            first, stop = split(len(bounds), world)[rank]
            return [(c, *bounds[c]) for c in range(first, stop)]
        if not self.spec.float64_sums:
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
        if not self.spec.float64_sums:
            return world
        return max(parts, world)

    def _flat_gradients(self) -> Any:
        """The zeroed flat buffer, with every parameter's ``.grad`` a view into it.

        Backward then accumulates straight into the buffer that is all-reduced, and
        the reduced sum is the gradient the optimizer reads: no copies either way
        (DDP's ``gradient_as_bucket_view``)."""
        import torch

        if self._flat is None:
            dtype = self.params[0].dtype if self.params else torch.float32
            self._flat = torch.zeros(self.numel + 1, dtype=dtype, device=self.device)
            self._views, offset = [], 0
            for p in self.params:
                self._views.append(self._flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        else:
            self._flat.zero_()
        for p, view in zip(self.params, self._views, strict=True):
            p.grad = view
        return self._flat

    def _backward(
        self,
        indices: np.ndarray,
        weight: float,
        step: int,
        key: int,
        out: Any,
        stats: Any = None,
        *,
        own: bool = True,
    ) -> None:
        """One part's backward pass into ``out``; its BatchNorm statistics into the
        row ``stats``. ``own``: False for a pass computed for another rank's sake
        (an attack that knows the honest gradients), which records nothing."""
        import torch

        # dropout and other randomness: keyed by step and chunk or part, not by rank
        # (a survivor that takes over a part draws what its owner would have);
        # without float64 sums, seeded (0.06 ms) only when the rank or the step
        # sequence changes, which keeps ranks apart
        reseed = self.spec.deterministic or self.spec.float64_sums
        seed = None  # go on with this rank's own stream
        if reseed or (key, step) != self._unseeded_next:
            seed = (self.spec.seed * 1_000_003 + step) * 4099 + key
        self._unseeded_next = (key, step + 1)
        into_views = out is self._flat
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
        if total is self._total:  # float64 sums: rounded once, into the .grad views
            if self._flat is None:  # every part of this rank was empty (a short last batch)
                self._flat_gradients()
            self._flat.copy_(total)
            for p, view in zip(self.params, self._views, strict=True):
                p.grad = view  # autograd may have swapped one out (another layout)
        elif total is not self._flat:  # deterministic rows: the sum is a new tensor
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
        self._flat = self._total = self.stats_table = None


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
