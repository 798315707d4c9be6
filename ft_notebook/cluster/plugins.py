"""The control-plane plugins other features build on (imports Dask).

- :class:`ControlPlane` (SchedulerPlugin): membership by stable worker name,
  ``worker-joined`` / ``worker-lost`` / ``worker-hung`` events, the heartbeat
  watchdog that evicts hung workers through their nannies, holds against the idle
  shutdown, and the rendezvous store. A plugin of another feature, running in the
  same scheduler, finds it with :func:`control_plane`.
- :class:`HealthPlugin` (WorkerPlugin): memory and GPU health in every heartbeat,
  under :data:`HEALTH_METRIC` of ``WorkerState.metrics``.

Both are idempotent by name: installing them again keeps the running instances.
"""

from __future__ import annotations

from ft_notebook.cluster._control import (
    PLUGIN_NAME,
    ControlPlane,
    control_plane,
    signal_worker_process,
)
from ft_notebook.cluster._health import HEALTH_METRIC, GpuProbe, HealthPlugin, HealthSampler
from ft_notebook.cluster._members import Member, MemberState, name_key

__all__ = [
    "HEALTH_METRIC",
    "PLUGIN_NAME",
    "ControlPlane",
    "GpuProbe",
    "HealthPlugin",
    "HealthSampler",
    "Member",
    "MemberState",
    "control_plane",
    "name_key",
    "signal_worker_process",
]
