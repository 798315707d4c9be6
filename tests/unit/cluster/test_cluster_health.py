"""Health samples: memory always, GPU through NVML (faked: no GPU on this machine)."""

from __future__ import annotations

import os
import sys
import types
from typing import Any

import pytest

from ft_notebook.cluster.plugins import HEALTH_METRIC, GpuProbe, HealthPlugin, HealthSampler


class _Info:
    used, total = 3 * 2**30, 80 * 2**30


class _Util:
    gpu = 93


def _fake_nvml(calls: list[str], ecc_supported: bool = True) -> types.ModuleType:
    nvml: Any = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def record(name: str, value: Any) -> Any:
        def f(*args: Any) -> Any:
            calls.append(name)
            return value

        return f

    def ecc(*args: Any) -> int:
        if not ecc_supported:
            raise NVMLError("Not Supported")
        return 2

    nvml.NVMLError = NVMLError
    nvml.NVML_TEMPERATURE_GPU = 0
    nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    nvml.NVML_VOLATILE_ECC = 0
    nvml.nvmlInit = record("init", None)
    nvml.nvmlShutdown = record("shutdown", None)
    nvml.nvmlDeviceGetCount = record("count", 1)
    nvml.nvmlDeviceGetHandleByUUID = record("by-uuid", "handle")
    nvml.nvmlDeviceGetHandleByIndex = record("by-index", "handle")
    nvml.nvmlDeviceGetUUID = record("uuid", b"GPU-1234")
    nvml.nvmlDeviceGetIndex = record("index", 3)
    nvml.nvmlDeviceGetMemoryInfo = record("memory", _Info())
    nvml.nvmlDeviceGetUtilizationRates = record("util", _Util())
    nvml.nvmlDeviceGetTemperature = record("temp", 64)
    nvml.nvmlDeviceGetTotalEccErrors = ecc
    return nvml


def test_a_gpu_worker_reports_memory_utilisation_temperature_and_ecc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(calls))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234,GPU-5678")
    probe = GpuProbe.for_this_process()
    sample = probe.sample(now=100.0)
    assert sample == {
        "uuid": "GPU-1234",
        "index": 3,
        "memory_used": 3 * 2**30,
        "memory_total": 80 * 2**30,
        "utilization": 93,
        "temperature": 64,
        "ecc_uncorrected": 2,
    }
    assert "by-uuid" in calls
    n = len(calls)
    assert probe.sample(now=100.5) is sample  # at most once a second
    assert len(calls) == n
    probe.close()
    assert calls[-1] == "shutdown"


def test_unsupported_readings_are_empty_not_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([], ecc_supported=False))
    sample = GpuProbe("0").sample()
    assert sample is not None
    assert sample["ecc_uncorrected"] is None
    assert sample["temperature"] == 64


def test_a_cpu_worker_reports_memory_and_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(calls))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # how our CPU workers run
    sample = HealthSampler()()
    assert sample["gpu"] is None
    assert sample["gpu_id"] is None
    assert sample["pid"] == os.getpid()
    assert sample["rss"] > 10 * 2**20
    assert calls == []  # NVML not even opened


def test_without_nvml_there_is_no_gpu_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert GpuProbe.for_this_process().sample() is None


def test_the_plugin_installs_one_metric_and_removes_it() -> None:
    worker = types.SimpleNamespace(metrics={})
    plugin = HealthPlugin()
    plugin.setup(worker)
    first = worker.metrics[HEALTH_METRIC]
    plugin.setup(worker)  # installed twice (preload, then registration): one sampler
    assert worker.metrics[HEALTH_METRIC] is first
    plugin.teardown(worker)
    assert worker.metrics == {}
    assert (plugin.name, plugin.idempotent) == ("ft-notebook-health", True)
