"""What a kernel and the service coordinator say to each other.

Kernels reach the coordinator (a SchedulerPlugin, :mod:`._coordinator`) through one
scheduler handler, :data:`SCHEDULER_HANDLER`, with a :class:`ServiceAction`
(``client.scheduler.ft_service(action=ServiceAction.TABLE.value, name=...)``). The
answers are plain dicts (msgpack on the wire); each replica row of a service's table
carries its :class:`ReplicaState` as the enum's string, the same string the REST
model (``ReplicaModel.state``) and the JupyterLab panel show.

Importing this module loads neither Dask nor torch: the kernel's handle uses it.
"""

from __future__ import annotations

import enum

#: The scheduler handler the coordinator registers; it takes a :class:`ServiceAction`.
SCHEDULER_HANDLER = "ft_service"


class ServiceAction(str, enum.Enum):
    """What a kernel asks of the coordinator (the ``action`` of :data:`SCHEDULER_HANDLER`)."""

    CREATE = "create"  # name, factory, replicas, routing, example, fallback -> the table
    TABLE = "table"  # name -> the service's replica table
    SETUP = "setup"  # name -> the table, the fallback and the routing settings
    NAMES = "names"  # -> every service: name, health, wanted, created
    SCALE = "scale"  # name, replicas -> the table
    REMOVE = "remove"  # name -> {"name": name, "closed": True}
    #: from a replica's worker: name, replica, incarnation, error ("" when it answers again)
    FAILING = "failing"


class ReplicaState(str, enum.Enum):
    """Where one replica of a service is, in the coordinator's table::

    WAITING (no worker yet) ─► WARMING (placed: its model builds, its example runs)
    WARMING ─► READY (takes requests)
            ─► FAILED (the model did not build on that worker: not tried there again)
            ─► WAITING (the worker could not start it yet: placed again)
    WARMING | READY ─► LOST (its worker lost or hung)
    any of them ─► LOST (scaled down, or the service closed)
    WAITING | FAILED | LOST ─► WARMING (placed on a worker with room)

    The replica on its worker answers ``ft_serve_state`` and pings in the same words
    (``warming``, ``ready``, ``failed``; ``closed`` once stopped).
    """

    WAITING = "waiting"
    WARMING = "warming"
    READY = "ready"
    FAILED = "failed"
    LOST = "lost"

    @property
    def placed(self) -> bool:
        """Whether the replica holds a worker: warming there, or ready."""
        return self in (ReplicaState.WARMING, ReplicaState.READY)
