"""Worker health, carried to the scheduler on every heartbeat.

:class:`HealthPlugin` adds one custom metric, ``ft-notebook``, to its worker: the
process's resident memory and, where the worker has a GPU, that GPU's memory,
utilisation, temperature and uncorrected ECC error count read through NVML. Dask
sends custom metrics with each heartbeat, so the scheduler (and
:class:`~ft_notebook.cluster.plugins.ControlPlane`) always holds a sample at most one
heartbeat old, with no extra connection. NVML is read at most once a second and any
NVML failure leaves the GPU fields empty: health never breaks a heartbeat.

A worker's GPU is the first entry of its ``CUDA_VISIBLE_DEVICES`` (a UUID for the
clusters we start), or the only GPU of a machine that has one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

logger = logging.getLogger(__name__)

#: The key of our sample in the worker's heartbeat metrics (``WorkerState.metrics``).
HEALTH_METRIC = "ft-notebook"
_GPU_PERIOD_S = 1.0


class GpuProbe:
    """NVML readings of one GPU; every failure reads as "unknown", never raises."""

    def __init__(self, token: str | None) -> None:
        self._token = token
        self._handle: Any = None
        self._nvml: Any = None
        self._ready = False
        self._last: dict[str, Any] | None = None
        self._last_time = float("-inf")

    @classmethod
    def for_this_process(cls) -> GpuProbe:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return cls(token="")  # the machine's only GPU, if it has exactly one
        first = visible.split(",")[0].strip()
        return cls(token=first or None)

    def _open(self) -> None:
        self._ready = True
        if self._token is None:
            return
        try:
            import pynvml  # type: ignore[import-untyped,unused-ignore]

            pynvml.nvmlInit()
        except Exception:  # no package, no driver: a CPU worker
            return
        self._nvml = pynvml
        try:
            if self._token == "":
                if pynvml.nvmlDeviceGetCount() == 1:
                    self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            elif self._token.isdigit():
                self._handle = pynvml.nvmlDeviceGetHandleByIndex(int(self._token))
            else:
                self._handle = pynvml.nvmlDeviceGetHandleByUUID(self._token)
        except Exception as e:
            logger.warning("NVML cannot find GPU %r of this worker: %s", self._token, e)

    def sample(self, now: float | None = None) -> dict[str, Any] | None:
        now = time.monotonic() if now is None else now
        if now - self._last_time < _GPU_PERIOD_S:
            return self._last
        self._last_time = now
        if not self._ready:
            self._open()
        if self._handle is None:
            return None
        self._last = self._read()
        return self._last

    def _read(self) -> dict[str, Any]:
        nvml, handle = self._nvml, self._handle
        out: dict[str, Any] = {}
        readers: dict[str, Callable[[], Any]] = {
            "uuid": lambda: _text(nvml.nvmlDeviceGetUUID(handle)),
            "index": lambda: int(nvml.nvmlDeviceGetIndex(handle)),
            "memory_used": lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).used),
            "memory_total": lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
            "utilization": lambda: int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            "temperature": lambda: int(
                nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
            ),
            "ecc_uncorrected": lambda: int(
                nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            ),
        }
        for key, read in readers.items():
            try:
                out[key] = read()
            except Exception:  # not supported on this GPU (ECC on consumer cards)
                out[key] = None
        return out

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = self._handle = None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class HealthSampler:
    """The metric function Dask calls on each heartbeat: ``sampler(worker) -> dict``."""

    def __init__(self, gpu: GpuProbe | None = None) -> None:
        import psutil

        self._process = psutil.Process()
        self.gpu = gpu if gpu is not None else GpuProbe.for_this_process()
        self.visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")

    def __call__(self, worker: Any = None) -> dict[str, Any]:
        gpu = self.gpu.sample()
        return {
            "time": time.time(),
            "pid": os.getpid(),
            "rss": self._process.memory_info().rss,
            "gpu_id": (gpu or {}).get("uuid") or self.visible_devices or None,
            "gpu": gpu,
        }


def install(worker: Any) -> HealthSampler:
    """Add the health metric to ``worker`` unless it has one (idempotent)."""
    sampler = worker.metrics.get(HEALTH_METRIC)
    if not isinstance(sampler, HealthSampler):
        sampler = worker.metrics[HEALTH_METRIC] = HealthSampler()
    return sampler


class HealthPlugin(WorkerPlugin):
    """Reports each worker's memory and GPU health in its heartbeats."""

    name = "ft-notebook-health"
    idempotent = True

    def setup(self, worker: Any) -> None:
        install(worker)

    def teardown(self, worker: Any) -> None:
        sampler = worker.metrics.pop(HEALTH_METRIC, None)
        if isinstance(sampler, HealthSampler):
            sampler.gpu.close()
