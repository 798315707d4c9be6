"""BatchNorm statistics that end where a run without failures ends them.

A BatchNorm layer in training mode updates its running mean and variance (and
``num_batches_tracked``) in place during ``forward``, from the batch it sees. Left to
itself on a rank, it sees only the parts of the step that rank computes: each rank
ends with statistics of its own, and a run that lost a worker ends with others again
(measured: parameters bit-identical to the failure-free run, ``running_var`` off by
0.41, ``num_batches_tracked`` 225 against 180).

The semantics here are the parameters' own: **a step's buffers end as if the parts of
the step had run in part order on one process**, whatever the world size. During a
part's forward pass the layers' running statistics are hidden (a BatchNorm in training
mode normalizes by the batch's statistics either way, so the output is the same) and
each layer's batch mean, unbiased variance and count are written into the part's row
of a small float64 table. The table is all-reduced like the gradients (each rank fills
its parts' rows and leaves the others zero, so the sum is exact in any order), and
every rank then applies the momentum updates row after row, in part order: all ranks
hold the same buffers, and a lost worker changes nothing.

A module that changes any other buffer in ``forward`` would drift the same way, and
nothing here can say how to combine it: the run stops at the first such step, naming
the module, rather than end with buffers nobody can vouch for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ft_notebook.exceptions import TrainingError


class BufferChangedInForward(TrainingError):
    """A module other than BatchNorm changed one of its buffers during a forward pass."""


class BatchStats:
    """The BatchNorm layers of one rank's model, and their statistics per part."""

    def __init__(self, model: Any) -> None:
        from torch.nn.modules.batchnorm import _BatchNorm

        #: (name, layer, offset of its columns) of every layer that tracks statistics
        self.layers: list[tuple[str, Any, int]] = []
        width = 0
        for name, module in model.named_modules():
            if (
                isinstance(module, _BatchNorm)
                and module.track_running_stats
                and module.running_mean is not None
            ):
                self.layers.append((name or type(module).__name__, module, width))
                width += 1 + 2 * module.num_features  # count, mean, variance
        #: columns of a part's row
        self.width = width
        #: id(layer) -> (name, offset): the hook's lookup; a layer of a copy of the
        #: model (a background evaluation's deepcopy keeps the hooks) is not in it
        self._where = {id(m): (name, offset) for name, m, offset in self.layers}
        tracked = {id(m) for _, m, _ in self.layers}
        #: every other module's buffers, which no forward pass may change
        self._others = [
            (name or type(m).__name__, m)
            for name, m in model.named_modules()
            if id(m) not in tracked and any(True for _ in m.buffers(recurse=False))
        ]
        self._row: Any = None
        self._seen: set[int] = set()
        self._hooks = [m.register_forward_pre_hook(self._record) for _, m, _ in self.layers]

    def __bool__(self) -> bool:
        return bool(self.layers)

    def table(self, parts: int, device: Any) -> Any:
        """A zeroed (parts, width) float64 table for one step's statistics."""
        import torch

        return torch.zeros(parts, self.width, dtype=torch.float64, device=device)

    @contextlib.contextmanager
    def forward(self, row: Any = None, *, own: bool = True) -> Iterator[None]:
        """Around one part's forward pass: the layers in training mode do not update
        their running statistics; with ``row``, each one's batch statistics go there.
        ``own``: a pass of this rank's own share, where no other buffer may change
        (False: a pass computed for another rank's sake, checked by that rank)."""
        hidden = []
        for _, m, _ in self.layers:
            if m.training:
                hidden.append((m, m.running_mean, m.running_var, m.num_batches_tracked))
                m.running_mean = m.running_var = m.num_batches_tracked = None
        before = self._other_buffers() if own else None
        self._row, self._seen = row, set()
        try:
            yield
        finally:
            self._row = None
            for m, mean, var, count in hidden:
                m.running_mean, m.running_var, m.num_batches_tracked = mean, var, count
        if before is not None:
            self._check_others(before)

    def _record(self, module: Any, args: tuple[Any, ...]) -> None:
        where = self._where.get(id(module))
        if self._row is None or where is None or not module.training:
            return
        import torch

        name, offset = where
        if id(module) in self._seen:
            raise TrainingError(
                f"BatchNorm layer {name!r} ran twice in one forward pass: ft.fit keeps "
                "BatchNorm statistics exact for layers that run once per pass. Use a "
                "layer per call, or put it in eval() mode to freeze its statistics."
            )
        self._seen.add(id(module))
        x = args[0].detach()
        dims = [0, *range(2, x.dim())]
        count = x.numel() // max(1, x.shape[1])
        var, mean = torch.var_mean(x, dim=dims, correction=1 if count > 1 else 0)
        c = module.num_features
        self._row[offset] = count
        self._row[offset + 1 : offset + 1 + c] = mean
        self._row[offset + 1 + c : offset + 1 + 2 * c] = var

    def apply(self, table: Any) -> None:
        """The momentum updates of a step, part after part, from the reduced table."""
        for row in table:
            for _, m, offset in self.layers:
                count = float(row[offset])
                if count == 0:  # the layer did not run in that part (or in eval mode)
                    continue
                c = m.num_features
                m.num_batches_tracked.add_(1)
                momentum = m.momentum
                factor = 1.0 / float(m.num_batches_tracked) if momentum is None else momentum
                mean = row[offset + 1 : offset + 1 + c].to(m.running_mean.dtype)
                var = row[offset + 1 + c : offset + 1 + 2 * c].to(m.running_var.dtype)
                m.running_mean.mul_(1 - factor).add_(mean, alpha=factor)
                m.running_var.mul_(1 - factor).add_(var, alpha=factor)

    def _other_buffers(self) -> list[tuple[str, str, Any, int]]:
        return [
            (module_name, key, t, t._version)
            for module_name, m in self._others
            for key, t in m._buffers.items()
            if t is not None
        ]

    def _check_others(self, before: list[tuple[str, str, Any, int]]) -> None:
        owners = dict(self._others)
        for module_name, key, t, version in before:
            now = owners[module_name]._buffers.get(key)
            if now is not t or t._version != version:
                raise BufferChangedInForward(
                    f"{module_name!r} ({type(owners[module_name]).__name__}) changed its "
                    f"buffer {key!r} during a forward pass. ft.fit keeps BatchNorm "
                    "statistics the same on every rank and after a lost worker, but "
                    "cannot say how to combine this buffer across workers, so the run "
                    "stops rather than end with buffers that depend on who computed "
                    "what. Keep the state in a parameter (requires_grad=False) updated "
                    "outside forward, or put the module in eval() mode."
                )
