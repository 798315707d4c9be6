"""GPU tensors: saved from device memory, loaded on the CPU; save_async copies through
pinned memory without blocking, and later kernels on the stream cannot race it."""

from __future__ import annotations

import pytest
import torch

from ft_notebook.store import CheckpointStore

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]


def test_cuda_tensors_round_trip(url: str) -> None:
    store = CheckpointStore(url, publish_events=False)
    w = torch.randn(1 << 20, device="cuda", dtype=torch.bfloat16)
    store.save("gpu", 1, {"w": w, "t": w[::2]})
    out = store.load("gpu").state
    assert out["w"].device.type == "cpu"
    assert torch.equal(out["w"], w.cpu())
    assert torch.equal(out["t"], w[::2].cpu())


def test_save_async_copies_before_later_kernels_change_the_tensor(url: str) -> None:
    store = CheckpointStore(url, publish_events=False)
    w = torch.randn(64 << 20, device="cuda")  # 256 MB: the copy is still running below
    before = w.cpu()
    handle = store.save_async("gpu", 1, {"w": w})
    w.mul_(0)  # ordered after the copy on the same stream
    handle.result(timeout=120)
    assert torch.equal(store.load("gpu").state["w"], before)
    second = store.save_async("gpu", 2, {"w": w})  # the pinned buffer is reused
    assert second.result(timeout=120).step == 2
    assert float(store.load("gpu").state["w"].abs().sum()) == 0.0
