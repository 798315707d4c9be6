"""Which GPUs a cluster may take, and how many workers fit the machine.

On a shared GPU server a cluster takes only what it is allowed and what is free:
the GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible, minus those another user's
processes are using, unless ``gpus=`` names them. It runs one worker per GPU, or on
CPU a worker count that fits the cores, each worker with one Dask thread and
``cores ÷ workers`` torch/OpenMP threads, so workers do not starve each other's
heartbeats.

GPUs are named by their nvidia-smi index (PCI bus order, which the workers are told
to use through ``CUDA_DEVICE_ORDER``) or UUID; a worker is pinned to its GPU by UUID.
NVML (nvidia-ml-py) is imported only here and only when asked; without it, or without
a driver, the machine has no GPUs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from ft_notebook.exceptions import ClusterError

logger = logging.getLogger(__name__)

#: "auto" CPU workers: all cores up to this many; more only when asked.
MAX_AUTO_CPU_WORKERS = 4


@dataclass(frozen=True)
class GPU:
    index: int
    uuid: str
    name: str = ""
    memory_total: int = 0
    #: uids of the other users whose processes use it (-1: a process we cannot see).
    other_users: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.index} ({self.uuid})"


@dataclass(frozen=True)
class WorkerSlot:
    """One worker to start: its stable name and the GPU it is pinned to, if any."""

    name: str
    gpu: GPU | None = None


@dataclass(frozen=True)
class WorkerPlan:
    slots: tuple[WorkerSlot, ...]
    #: torch and OpenMP threads of each worker: the cores divided among the workers.
    torch_threads: int

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(s.gpu.uuid for s in self.slots if s.gpu is not None)

    def process_env(self) -> dict[str, str]:
        """Environment of the process that spawns the workers (read before imports)."""
        n = str(self.torch_threads)
        return {
            "OMP_NUM_THREADS": n,
            "MKL_NUM_THREADS": n,
            "OPENBLAS_NUM_THREADS": n,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def discover_gpus() -> list[GPU]:
    """Every GPU NVML sees, with the other users using each; [] without NVML or a driver."""
    try:
        import pynvml  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
            found.append(
                GPU(
                    index=index,
                    uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    memory_total=int(total),
                    other_users=_other_users(pids),
                )
            )
        return found
    except pynvml.NVMLError as e:
        logger.warning("NVML failed while listing GPUs (%s); using no GPU", e)
        return []
    finally:
        pynvml.nvmlShutdown()


def _other_users(pids: Sequence[int]) -> tuple[int, ...]:
    import psutil

    uids = set()
    for pid in pids:
        try:
            uid = psutil.Process(pid).uids().real
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            uid = -1  # another container's process: count it as someone else's
        if uid != os.getuid():
            uids.add(uid)
    return tuple(sorted(uids))


def visible(inventory: Sequence[GPU], cuda_visible_devices: str | None) -> list[GPU]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible, in its order.

    As CUDA does, an empty value hides every GPU and the list stops at the first
    entry that names no GPU.
    """
    if cuda_visible_devices is None:
        return list(inventory)
    out: list[GPU] = []
    for token in cuda_visible_devices.split(","):
        gpu = _find(inventory, token.strip())
        if gpu is None:
            break
        if gpu not in out:
            out.append(gpu)
    return out


def _find(inventory: Sequence[GPU], token: str) -> GPU | None:
    if not token:
        return None
    if token.isdigit():
        return next((g for g in inventory if g.index == int(token)), None)
    matches = [g for g in inventory if g.uuid.startswith(token) or g.uuid == f"GPU-{token}"]
    return matches[0] if len(matches) == 1 else None


def select_gpus(
    option: str | tuple[str, ...],
    inventory: Sequence[GPU],
    cuda_visible_devices: str | None,
) -> list[GPU]:
    """The GPUs a new cluster takes for a ``gpus`` option (see ft_notebook.yaml)."""
    allowed = visible(inventory, cuda_visible_devices)
    if option == "none":
        return []
    if option == "all":
        return allowed
    if option == "auto":
        free = [g for g in allowed if not g.other_users]
        if allowed and not free:
            logger.warning(
                "every visible GPU (%s) is in use by another user's processes; starting "
                "CPU workers. Pass gpus=[...] to share one anyway.",
                ", ".join(g.label for g in allowed),
            )
        return free
    chosen: list[GPU] = []
    for token in option:
        gpu = _find(inventory, token)
        if gpu is None:
            have = ", ".join(g.label for g in inventory) or "none"
            raise ClusterError(
                f"gpus= names GPU {token!r}, which does not exist on this machine "
                f"(GPUs NVML sees: {have}). Name GPUs by nvidia-smi index or UUID, or "
                f"pass gpus='none' for CPU workers."
            )
        if gpu not in allowed:
            raise ClusterError(
                f"gpus= names GPU {gpu.label}, which CUDA_VISIBLE_DEVICES="
                f"{cuda_visible_devices!r} hides from this process (visible: "
                f"{[g.index for g in allowed]}). Pick a visible GPU or change "
                f"CUDA_VISIBLE_DEVICES."
            )
        if gpu not in chosen:
            chosen.append(gpu)
    return chosen


def plan_workers(workers: int | None, gpus: Sequence[GPU], cores: int) -> WorkerPlan:
    """One worker per GPU, or ``workers`` (default: fits the cores) CPU workers."""
    if gpus:
        if workers is not None and workers != len(gpus):
            raise ClusterError(
                f"workers={workers} was asked for, but the cluster runs one worker per "
                f"GPU and {len(gpus)} GPU(s) were selected "
                f"({', '.join(g.label for g in gpus)}). Drop workers=, select "
                f"{workers} GPU(s) with gpus=, or pass gpus='none' for CPU workers."
            )
        slots = tuple(WorkerSlot(name=f"gpu{g.index}", gpu=g) for g in gpus)
    else:
        n = workers if workers is not None else max(1, min(cores, MAX_AUTO_CPU_WORKERS))
        if n < 1:
            raise ClusterError(f"workers={n} cannot start a cluster; ask for 1 or more.")
        slots = tuple(WorkerSlot(name=f"cpu{i}") for i in range(n))
    return WorkerPlan(slots=slots, torch_threads=max(1, cores // len(slots)))
