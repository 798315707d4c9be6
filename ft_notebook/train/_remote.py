"""Functions the kernel runs on the scheduler (``Client.run_on_scheduler``)."""

from __future__ import annotations

from typing import Any


def submit_run(name: str, spec: bytes, options: Any, dask_scheduler: Any = None) -> dict[str, Any]:
    from ft_notebook.train._coordinator import coordinator

    return coordinator(dask_scheduler).submit(name, spec, options)


def run_info(name: str, dask_scheduler: Any = None) -> dict[str, Any]:
    from ft_notebook.train._coordinator import coordinator

    return coordinator(dask_scheduler).info(name)


def run_state(name: str, dask_scheduler: Any = None) -> str:
    """The run's state alone: what ``Run.wait()`` checks between events (a few bytes,
    where ``run_info`` is the whole record)."""
    from ft_notebook.train._coordinator import coordinator

    return coordinator(dask_scheduler)._get(name).state.value


def cancel_run(name: str, dask_scheduler: Any = None) -> dict[str, Any]:
    from ft_notebook.train._coordinator import coordinator

    return coordinator(dask_scheduler).cancel(name)


def list_runs(dask_scheduler: Any = None) -> list[str]:
    from ft_notebook.train._coordinator import coordinator

    try:
        plugin = coordinator(dask_scheduler)
    except Exception:
        return []
    return sorted(plugin.runs, key=lambda n: plugin.runs[n].started_at)
