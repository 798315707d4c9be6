"""The workers of a cluster and their health, as rows and as a text table.

Rows come from the scheduler's :class:`ControlPlane` (so a worker that is gone is
still listed, as ``lost``, under its stable name until it rejoins), or from the
scheduler alone on a cluster without our plugin. ``%ft cluster status`` and
``ft-notebook cluster status`` print :func:`format_table` of :func:`status`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class WorkerStatus:
    """One worker of the status table."""

    name: str
    address: str
    state: str
    pid: int | None = None
    gpu: str | None = None
    heartbeat_age_s: float | None = None
    rss: int | None = None
    memory_limit: int | None = None
    tasks: int = 0
    restarts: int = 0
    cause: str = ""
    gpu_memory_used: int | None = None
    gpu_memory_total: int | None = None
    gpu_utilization: int | None = None
    gpu_temperature: int | None = None
    gpu_ecc_uncorrected: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WorkerStatus:
        gpu = row.get("gpu_health") or {}
        names = {f.name for f in fields(cls)}
        plain = {k: v for k, v in row.items() if k in names}
        return cls(
            **plain,
            gpu_memory_used=gpu.get("memory_used"),
            gpu_memory_total=gpu.get("memory_total"),
            gpu_utilization=gpu.get("utilization"),
            gpu_temperature=gpu.get("temperature"),
            gpu_ecc_uncorrected=gpu.get("ecc_uncorrected"),
        )


def status(client: Any, timeout: float | None = None) -> list[WorkerStatus]:
    """One row per worker name of the cluster ``client`` is connected to; past
    ``timeout`` seconds without an answer (a hung scheduler), TimeoutError."""
    from ft_notebook.cluster._remote import scheduler_rows

    rows = client.run_on_scheduler(scheduler_rows, callback_timeout=timeout)
    return [WorkerStatus.from_row(r) for r in rows]


_COLUMNS = ("worker", "state", "pid", "heartbeat", "memory", "tasks", "restarts", "gpu")


def format_table(rows: Sequence[WorkerStatus]) -> str:
    """A plain-text table of ``rows``, aligned for a terminal or a notebook."""
    if not rows:
        return "(no workers)"
    cells = [_COLUMNS] + [_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_COLUMNS))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    causes = [f"{r.name}: {r.cause}" for r in rows if r.state != "running" and r.cause]
    return "\n".join(lines + causes)


def _cells(r: WorkerStatus) -> tuple[str, ...]:
    memory = _bytes(r.rss)
    if r.memory_limit:
        memory += f" / {_bytes(r.memory_limit)}"
    gpu = "-"
    if r.gpu_memory_total:
        gpu = (
            f"{_bytes(r.gpu_memory_used)} / {_bytes(r.gpu_memory_total)}, "
            f"{_num(r.gpu_utilization)}%, {_num(r.gpu_temperature)}°C, "
            f"ecc {_num(r.gpu_ecc_uncorrected)}"
        )
    elif r.gpu:
        gpu = r.gpu
    age = "-" if r.heartbeat_age_s is None else f"{r.heartbeat_age_s:.1f} s ago"
    return (r.name, r.state, _num(r.pid), age, memory, str(r.tasks), str(r.restarts), gpu)


def _num(value: object) -> str:
    return "-" if value is None else str(value)


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
