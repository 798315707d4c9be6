"""Worker preload of the clusters we start: torch before the first task, health at once.

Importing torch takes seconds. Done by the first task that unpickles a tensor, it
would stall the worker's event loop, and with it its heartbeats, long enough to look
hung; so every worker imports torch while it starts, before it registers with the
scheduler. torch's intra-op threads are pinned to ``OMP_NUM_THREADS`` (the cores
divided among the workers). The health metric is installed here too, so the
scheduler knows a worker's GPU from its very first message. The soft limit on open
files is raised to the hard one: every gloo listener keeps each connection made to it
(anyone's) open while its group lives, and a worker out of descriptors is aborted by
gloo (issue 36: 2,000 connects against a soft limit of 1,024).
"""

from __future__ import annotations

import contextlib
import os
import resource
from typing import Any

import torch

from ft_notebook.cluster._health import install


def dask_setup(worker: Any) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:  # an unlimited hard limit cannot be the soft one: it stays
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    install(worker)
