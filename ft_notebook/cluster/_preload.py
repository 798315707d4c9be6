"""Worker preload of the clusters we start: torch before the first task, health at once.

Importing torch takes seconds. Done by the first task that unpickles a tensor, it
would stall the worker's event loop, and with it its heartbeats, long enough to look
hung; so every worker imports torch while it starts, before it registers with the
scheduler. torch's intra-op threads are pinned to ``OMP_NUM_THREADS`` (the cores
divided among the workers). The health metric is installed here too, so the
scheduler knows a worker's GPU from its very first message.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ft_notebook.cluster._health import install


def dask_setup(worker: Any) -> None:
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    install(worker)
