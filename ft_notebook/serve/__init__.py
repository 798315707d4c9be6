"""Replicated inference that survives its replicas (``ft.serve``).

Data flow: :func:`serve` (kernel, :mod:`._service`) hands the model factory to the
:class:`~._coordinator.ServiceCoordinator` (a SchedulerPlugin), which places one
:mod:`replica <._replica>` per worker, admits each after its health check, and
replaces those whose worker is lost. Requests do not pass through the scheduler: the
caller's :mod:`router <._router>` sends them straight to the replicas' workers, picks
the least busy one, hedges slow calls, re-sends those whose replica failed, and falls
back when none can answer, under the limits of :mod:`._policy`. Every answer says
where it came from and at which tier: HEALTHY, DEGRADED or FALLBACK.

Importing this package loads neither Dask nor torch (``import ft_notebook`` binds
``serve`` from here); the router does, on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ft_notebook.serve._service import Service, serve, service, services

if TYPE_CHECKING:
    from ft_notebook.serve._router import Answer

__all__ = ["Answer", "Service", "serve", "service", "services"]


def __getattr__(name: str) -> object:
    if name == "Answer":
        from ft_notebook.serve._router import Answer

        return Answer
    raise AttributeError(f"module 'ft_notebook.serve' has no attribute {name!r}")
