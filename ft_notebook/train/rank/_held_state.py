"""The training state one rank holds, and what it can say about it.

:class:`HeldState` owns the rank's :class:`~._trainer.Trainer` (model, optimizer,
data; a rollback may replace it, so the other parts always read it from here), the
newest step it committed, the steps to skip for non-finite gradients, and the
:class:`~._verify.StateCheck` of what it can vouch for. Its bytes (``torch.save``,
read back with ``weights_only=True``) are what one rank sends another.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from ft_notebook.train.rank._verify import StateCheck

if TYPE_CHECKING:
    from ft_notebook.train.rank._trainer import Trainer


class HeldState:
    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        #: Committed steps; -1: only the factories' state, not yet agreed on.
        self.step = -1
        self.skip: set[int] = set()  # steps skipped for non-finite gradients
        self.nonfinite_total = 0
        #: The loss of the newest committed step, as reported (saved beside the state,
        #: so a run resumed from its final checkpoint still has one to report).
        self.loss: float | str | None = None
        self.check = StateCheck()  # the state this rank can vouch for

    def commit(self, step: int) -> None:
        """This rank now holds ``step``, committed itself or read from a checkpoint
        whose hashes the store verified: it vouches for it."""
        self.step = step
        self.check.committed(step, self.trainer)

    def restore_counts(self, ft: dict[str, Any]) -> None:
        """The skipped steps, non-finite count and last loss saved beside a state."""
        self.skip = set(ft.get("skip", []))
        self.nonfinite_total = int(ft.get("nonfinite_total", 0))
        if ft.get("loss") is not None:  # a checkpoint written before losses were saved: none
            self.loss = ft["loss"]

    def to_bytes(self) -> bytes:
        return bytes(self.to_buffer())

    def to_buffer(self) -> memoryview:
        """The state as ``torch.save`` writes it, without a copy of the bytes."""
        import torch

        buf = io.BytesIO()
        state = self.trainer.state()
        state["ft"] = {
            "skip": sorted(self.skip),
            "nonfinite_total": self.nonfinite_total,
            "loss": self.loss,
        }
        torch.save(state, buf)
        return buf.getbuffer()

    def load_bytes(self, data: Any) -> None:
        """Load a state from ``torch.save`` bytes (any bytes-like object)."""
        import torch

        # weights_only: a peer's bytes hold tensors and plain values, never code
        state = torch.load(io.BytesIO(data), map_location=self.trainer.device, weights_only=True)
        self.trainer.load_state(state)
        self.restore_counts(state.get("ft", {}))
