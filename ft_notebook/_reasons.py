"""Why a replica or a worker stopped, said to people, with the raw text kept beside it.

Failures reach a service as exceptions (a ``CommClosedError`` from a call whose worker
died, an ``asyncio.TimeoutError``, a model's ``ValueError``) or as their text (a
replica's error sent back over the wire, the control plane's cause of a loss). Shown as
they are they read ``CommClosedError: in <TLS (closed) ConnectionPool.ft_serve_predict
local=tls://... remote=...>: Stream is closed``. :func:`explain` maps the known kinds
(worker lost, connection closed, timeout, hang, Dask's ``KilledWorker``, memory, the
model raised X) to a sentence (``replica 1's worker was lost (connection closed)``) and
keeps the raw text as :attr:`Reason.detail`, for a tooltip or a details line.

The sentence is made where the failure is seen (the service coordinator, the caller's
router) and travels in the events and status that every view reads, so a dashboard,
``svc.status()`` and the JupyterLab panel show the same words. It imports nothing of
the package: every layer may use it.
"""

from __future__ import annotations

import asyncio
import enum
import re
from dataclasses import dataclass

__all__ = ["Reason", "ReasonKind", "explain"]

#: The longest error message quoted in a sentence; the whole one is in the detail.
_QUOTE_CHARS = 80


class ReasonKind(str, enum.Enum):
    """What kind of failure a :class:`Reason` says."""

    WORKER_LOST = "worker-lost"  # the control plane removed the worker
    CONNECTION_CLOSED = "connection-closed"  # a call's connection to the worker closed
    WORKER_HUNG = "worker-hung"  # no heartbeat: evicted
    TIMEOUT = "timeout"  # no answer in time
    KILLED_WORKER = "killed-worker"  # Dask gave up on a task whose workers kept dying
    MEMORY = "memory"  # out of memory
    MODEL_RAISED = "model-raised"  # the model (or its factory) raised
    OTHER = "other"  # already words: shown as it is


@dataclass(frozen=True)
class Reason:
    """A sentence for people (:attr:`text`) and what it was made from (:attr:`detail`,
    ``""`` when the text is all there was)."""

    text: str
    detail: str = ""
    kind: ReasonKind = ReasonKind.OTHER

    def __str__(self) -> str:
        return self.text


#: Exception type names (as they arrive in remote text) by kind.
_CONNECTION = {
    "CommClosedError": "connection closed",
    "StreamClosedError": "connection closed",
    "ConnectionResetError": "connection reset",
    "ConnectionAbortedError": "connection aborted",
    "ConnectionRefusedError": "connection refused",
    "BrokenPipeError": "connection broken",
    "ConnectionError": "connection failed",
}
_TIMEOUT = {"TimeoutError"}
_MEMORY = {"MemoryError", "OutOfMemoryError"}
#: The control plane's causes (``cluster/_control.py``).
_LOST = "process gone or connection closed"
_HUNG = re.compile(r"evicted: no heartbeat for ([\d.]+ s)")
_TYPED = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Worker|Interrupt)): ?(.*)$", re.S)


def explain(
    cause: BaseException | str,
    *,
    replica: int | str | None = None,
    worker: str = "",
    building: bool = False,
) -> Reason:
    """``cause`` (an exception, or the text of one) as a sentence about ``replica``
    (its index, or its key ``"service/index"``) on ``worker``.

    ``building``: the failure came while the replica's model was built, not while it
    answered. Text that names no known failure is kept as it is (it is words already).
    """
    who = _subject(replica)
    on = f" {worker}" if worker else ""
    if isinstance(cause, BaseException):
        name, message = type(cause).__name__, str(cause)
        detail = f"{name}: {message}" if message else name
        if isinstance(cause, (asyncio.TimeoutError, TimeoutError)):
            name = "TimeoutError"  # before OSError: TimeoutError is one
        elif isinstance(cause, ConnectionError) and name not in _CONNECTION:
            name = "ConnectionError"
        elif isinstance(cause, OSError) and name not in _CONNECTION and "closed" in message:
            name = "CommClosedError"  # a closed comm wrapped in a plain OSError
        elif isinstance(cause, MemoryError):
            name = "MemoryError"
        allowed = getattr(cause, "allowed_failures", None)  # KilledWorker's: deaths - 1
        failures = allowed + 1 if isinstance(allowed, int) else None
    else:
        detail = cause.strip()
        first = detail.splitlines()[0] if detail else ""
        if first == _LOST:
            return Reason(
                f"{who}'s worker{on} was lost (its process is gone or its connection closed)",
                detail,
                ReasonKind.WORKER_LOST,
            )
        hung = _HUNG.match(first)
        if hung:
            return Reason(
                f"{who}'s worker{on} hung (no heartbeat for {hung.group(1)}) and was evicted",
                detail,
                ReasonKind.WORKER_HUNG,
            )
        typed = _TYPED.match(detail)
        if typed is None:
            return Reason(detail)
        name, message = typed.group(1).rsplit(".", 1)[-1], typed.group(2)
        found = re.search(r"(\d+) different workers", message)
        failures = int(found.group(1)) if found else None
    return _sentence(who, on, name, message, detail, failures, building)


def _sentence(
    who: str,
    on: str,
    name: str,
    message: str,
    detail: str,
    failures: object,
    building: bool,
) -> Reason:
    if name in _CONNECTION:
        return Reason(
            f"{who}'s worker{on} was lost ({_CONNECTION[name]})",
            detail,
            ReasonKind.CONNECTION_CLOSED,
        )
    if name in _TIMEOUT:
        return Reason(f"{who} did not answer in time", detail, ReasonKind.TIMEOUT)
    if name == "KilledWorker":
        deaths = f"{failures} workers died" if isinstance(failures, int) else "workers died"
        return Reason(
            f"{who}'s workers kept dying while running it (Dask gave up: {deaths})",
            detail,
            ReasonKind.KILLED_WORKER,
        )
    where = f" while it was built on worker{on}" if building and on else ""
    where = where or (" while it was built" if building else "")
    if name in _MEMORY:
        return Reason(f"{who}'s model ran out of memory{where}", detail, ReasonKind.MEMORY)
    quoted = _quote(message)
    said = f" ({quoted})" if quoted else ""
    return Reason(f"{who}'s model raised {name}{said}{where}", detail, ReasonKind.MODEL_RAISED)


def _subject(replica: int | str | None) -> str:
    if replica is None or replica == "":
        return "the replica"
    index = str(replica).rsplit("/", 1)[-1]
    return f"replica {index}"


def _quote(message: str) -> str:
    """The first line of an error message, short enough for a sentence."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    if first.startswith("Traceback"):
        return ""
    return first if len(first) <= _QUOTE_CHARS else first[: _QUOTE_CHARS - 1].rstrip() + "…"
