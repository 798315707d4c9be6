"""torch's global random generator, shared by every thread of a worker process.

A model factory (``nn.Linear`` draws its initial weights), dropout and random data
augmentation all draw from one generator per process. Two of ours that draw at once
on one worker take each other's numbers: a rank that seeded the generator and then
built its model got other weights than the same factory builds alone, whenever
another rank actor of the same worker built its own model at that moment (a late
joiner of a run that had just ended, warming up beside the next run's rank; two runs
at once). Its run then trained, verified and COMPLETED from weights no undisturbed
run has (issue 17: 2 of 200 drills).

So every draw of ours on a worker happens under :data:`DRAWS`, one at a time per
process, and a rank draws from a :class:`Stream` of its own: seeded where it asks
for a seed, else taken on from where its previous draw left it, whatever other
threads drew in between. Code that is not ours (a user's task on the same worker)
can still draw in between; the ranks' check of their initial states
(:mod:`ft_notebook.train.rank._verify`) reports that.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

#: Held by every section of ours that seeds or draws from torch's global generator
#: on a worker: rank actors (their model factories, forward passes) and serving
#: replicas (their model factories).
DRAWS = threading.RLock()


class Stream:
    """One owner's random stream on torch's global generator (see the module doc)."""

    def __init__(self, device: Any = None) -> None:
        self.cuda = device if device is not None and device.type == "cuda" else None
        self._cpu: Any = None
        self._gpu: Any = None

    @contextlib.contextmanager
    def draws(self, seed: int | None = None) -> Iterator[None]:
        """Draw from this stream inside the block: from ``seed``, or (None) from where
        this stream's previous block left it."""
        import torch

        with DRAWS:
            if seed is not None:
                torch.manual_seed(seed)
            elif self._cpu is not None:
                torch.set_rng_state(self._cpu)
                if self.cuda is not None and self._gpu is not None:
                    torch.cuda.set_rng_state(self._gpu, self.cuda)
            try:
                yield
            finally:
                self._cpu = torch.get_rng_state()
                if self.cuda is not None:
                    self._gpu = torch.cuda.get_rng_state(self.cuda)
