"""One worker per GPU, pinned by UUID, with NVML health (needs an NVIDIA GPU).

Deselected by default (``-m 'not gpu'``) and skipped on machines without a GPU;
``pytest -m gpu`` runs it where there is one.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

import cloudpickle
import pytest

from ft_notebook.cluster import cluster, clusters, down, status
from ft_notebook.cluster._resources import discover_gpus
from ft_notebook.testing import poll_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # for client.run

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not discover_gpus(), reason="no NVIDIA GPU (NVML sees none)"),
]


def _cuda_view() -> dict[str, Any]:
    import os

    import torch

    return {
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "count": torch.cuda.device_count(),
    }


def test_one_worker_per_free_gpu_each_seeing_only_its_own() -> None:
    free = [g for g in discover_gpus() if not g.other_users]
    if not free:
        pytest.skip("every GPU is in use by another user")
    name = f"t-gpu-{uuid.uuid4().hex[:6]}"
    client = cluster(name=name, gpus="auto", set_as_default=False)
    try:
        info = next(c for c in clusters() if c.name == name)
        assert sorted(info.workers) == sorted(f"gpu{g.index}" for g in free)
        assert sorted(info.gpus) == sorted(g.uuid for g in free)
        views = client.run(_cuda_view)
        assert sorted(v["visible"] for v in views.values()) == sorted(g.uuid for g in free)
        assert {v["count"] for v in views.values()} == {1}
        rows = poll_for(
            lambda: [r for r in status(client) if r.gpu_memory_total] or None,
            timeout=30,
            what="GPU health in the heartbeats",
        )
        assert len(rows) == len(free)
        assert all(r.gpu_temperature is not None for r in rows)
    finally:
        client.close()
        down(name)
