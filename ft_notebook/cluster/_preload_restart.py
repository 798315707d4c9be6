"""Preload of a worker that a nanny restarts under ft_notebook: torch's lazy imports.

A rank's first optimizer ``state_dict`` or ``step`` imports ``torch._dynamo`` (about
0.9 s here, beside 1 s for torch itself). Done by the rank of a restarted worker, it
sits between the worker registering and its rank being ready, where a run is waiting
to admit it; done here, it is over before the worker registers, as a restarted
torchft replica has done its imports before it asks to join. First starts do not
pay it (:mod:`._preload` imports torch only): a cluster that never trains does not
need it, and a first run pays it once while it warms up anyway.

:mod:`ft_notebook.train.rank._actor` imports the same modules under a lock
(``import_lazy_torch``), a no-op once this ran.
"""

from __future__ import annotations

import logging

try:
    import torch._dynamo
    import torch.optim  # noqa: F401
except Exception as e:  # a preload that raises stops the worker from starting, for good
    logging.getLogger(__name__).warning(
        "could not import torch._dynamo before registering (%s: %s); a rank imports it "
        "when it first needs it",
        type(e).__name__,
        e,
    )
