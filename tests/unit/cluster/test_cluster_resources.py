"""GPU selection and worker plans (no GPU here: NVML is faked where it matters)."""

from __future__ import annotations

import os
import sys
import types
from typing import Any

import pytest

from ft_notebook.cluster._resources import (
    GPU,
    discover_gpus,
    plan_workers,
    select_gpus,
    visible,
)
from ft_notebook.exceptions import ClusterError

GPUS = [
    GPU(index=0, uuid="GPU-aaaa-0000", name="A"),
    GPU(index=1, uuid="GPU-bbbb-1111", name="B", other_users=(1001,)),
    GPU(index=2, uuid="GPU-cccc-2222", name="C"),
]


def test_cuda_visible_devices_restricts_like_cuda_does() -> None:
    assert visible(GPUS, None) == GPUS
    assert visible(GPUS, "") == []
    assert visible(GPUS, "2,0") == [GPUS[2], GPUS[0]]
    assert visible(GPUS, "GPU-cccc") == [GPUS[2]]  # a unique UUID prefix
    assert visible(GPUS, "0,7,2") == [GPUS[0]]  # stops at the first that names no GPU


def test_auto_skips_gpus_other_users_are_using() -> None:
    assert select_gpus("auto", GPUS, None) == [GPUS[0], GPUS[2]]
    assert select_gpus("auto", GPUS, "1,2") == [GPUS[2]]
    assert select_gpus("all", GPUS, "1,2") == [GPUS[1], GPUS[2]]
    assert select_gpus("none", GPUS, None) == []


def test_auto_with_every_gpu_busy_falls_back_to_cpu_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert select_gpus("auto", GPUS, "1") == []
    assert "in use by another user" in caplog.text


def test_naming_a_busy_gpu_takes_it_on_purpose() -> None:
    assert select_gpus(("1", "GPU-aaaa"), GPUS, None) == [GPUS[1], GPUS[0]]
    assert select_gpus(("0", "0"), GPUS, None) == [GPUS[0]]


def test_a_gpu_that_does_not_exist_is_a_clear_error() -> None:
    with pytest.raises(ClusterError, match=r"GPU '7', which does not exist") as info:
        select_gpus(("7",), GPUS, None)
    assert "0 (GPU-aaaa-0000)" in str(info.value)
    assert "gpus='none'" in str(info.value)
    with pytest.raises(ClusterError, match=r"GPUs NVML sees: none"):
        select_gpus(("0",), [], None)


def test_a_gpu_hidden_by_cuda_visible_devices_is_refused() -> None:
    with pytest.raises(ClusterError, match=r"CUDA_VISIBLE_DEVICES='2' hides"):
        select_gpus(("0",), GPUS, "2")


def test_one_worker_per_gpu_pinned_by_uuid() -> None:
    plan = plan_workers(None, [GPUS[0], GPUS[2]], cores=16)
    assert [s.name for s in plan.slots] == ["gpu0", "gpu2"]
    assert plan.gpus == ("GPU-aaaa-0000", "GPU-cccc-2222")
    assert plan.torch_threads == 8
    assert plan.process_env()["OMP_NUM_THREADS"] == "8"
    assert plan.process_env()["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    with pytest.raises(ClusterError, match="one worker per GPU"):
        plan_workers(3, [GPUS[0]], cores=16)


@pytest.mark.parametrize(
    ("workers", "cores", "expected", "threads"),
    [(None, 2, 2, 1), (None, 1, 1, 1), (None, 64, 4, 16), (3, 2, 3, 1), (2, 16, 2, 8)],
)
def test_cpu_workers_fit_the_cores(
    workers: int | None, cores: int, expected: int, threads: int
) -> None:
    plan = plan_workers(workers, [], cores=cores)
    assert [s.name for s in plan.slots] == [f"cpu{i}" for i in range(expected)]
    assert plan.torch_threads == threads
    assert plan.gpus == ()


class _Mem:
    total = 80 * 2**30


class _Proc:
    def __init__(self, pid: int) -> None:
        self.pid = pid


def _fake_nvml(pids_by_gpu: list[list[int]]) -> types.ModuleType:
    nvml: Any = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    nvml.NVMLError = NVMLError
    nvml.nvmlInit = lambda: None
    nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: len(pids_by_gpu)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetUUID = lambda h: f"GPU-{h:04d}".encode()
    nvml.nvmlDeviceGetName = lambda h: "Fake H200"
    nvml.nvmlDeviceGetMemoryInfo = lambda h: _Mem()
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [_Proc(p) for p in pids_by_gpu[h]]
    return nvml


def test_discovery_counts_other_users_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    # GPU 0 runs one of our processes; GPU 1 one we cannot see (another container)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([[os.getpid()], [2**22 + 7]]))
    found = discover_gpus()
    assert [(g.index, g.uuid, g.other_users) for g in found] == [
        (0, "GPU-0000", ()),
        (1, "GPU-0001", (-1,)),
    ]
    assert found[0].memory_total == 80 * 2**30
    assert select_gpus("auto", found, None) == [found[0]]


def test_without_a_driver_there_are_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = _fake_nvml([])

    def fail() -> None:
        raise nvml.NVMLError("driver not loaded")

    nvml.nvmlInit = fail
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert discover_gpus() == []
