"""The one exception tree of ft_notebook.

Every message says what happened, the values seen, and the next step. Recoverable
faults (a lost worker, a lagging checkpoint) are events and state, not exceptions;
these are raised only when the caller must act.

    FTError
    ├── ConfigError                 a setting has a value we cannot use
    ├── StoreError                  checkpoint storage
    │   ├── CheckpointNotFound
    │   ├── CheckpointCorrupt
    │   └── StoreUnsafe             a location other users can write to
    ├── SnapshotError               notebook namespace snapshots
    ├── ClusterError
    │   ├── NoWorkers
    │   └── ClusterUnreachable
    ├── TrainingError
    │   ├── RunFailed
    │   └── RendezvousTimeout
    ├── EventError                  an event that cannot be encoded or decoded
    ├── AggregationError            a robust aggregator whose condition does not hold
    ├── PlanError                   checkpoint-planning inputs that make no sense
    └── UnsafeName                  a user-given name that cannot become a path
"""

from __future__ import annotations

from collections.abc import Iterable


class FTError(Exception):
    """Base of every error ft_notebook raises on purpose."""


class ConfigError(FTError, ValueError):
    """A configuration value is missing, malformed or not one of the allowed values."""

    def __init__(
        self,
        key: str,
        value: object,
        *,
        allowed: Iterable[object] | None = None,
        expected: str | None = None,
    ) -> None:
        self.key = key
        self.value = value
        self.allowed = tuple(allowed) if allowed is not None else None
        if self.allowed is not None:
            want = "one of " + ", ".join(repr(a) for a in self.allowed)
        else:
            want = expected or "a valid value"
        env = "DASK_" + key.upper().replace("-", "_").replace(".", "__")
        super().__init__(
            f"Configuration key {key!r} has value {value!r}; expected {want}. "
            f"Fix it in your dask config (ft-notebook section) or in the "
            f"environment variable {env}."
        )


class StoreError(FTError):
    """Checkpoint storage failed or refused."""


class CheckpointNotFound(StoreError, KeyError):
    """The asked-for run or step has no committed checkpoint."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class CheckpointExists(StoreError):
    """A checkpoint of this run and step is already committed (they are never overwritten)."""


class CheckpointCorrupt(StoreError):
    """A checkpoint's files do not match its manifest."""


class StoreUnsafe(StoreError):
    """A location other users can write to was asked to hold or give pickled data."""


class SnapshotError(FTError):
    """A notebook snapshot could not be taken or restored."""


class ClusterError(FTError):
    """The Dask cluster could not be started, reached or used."""


class NoWorkers(ClusterError):
    """The cluster has no workers to run on."""


class ClusterUnreachable(ClusterError):
    """No scheduler answered at the address we had."""


class TrainingError(FTError):
    """A training run could not go on."""


class RunFailed(TrainingError):
    """A run ended in FAILED; the message carries the cause from the worker."""


class RendezvousTimeout(TrainingError):
    """Workers did not all arrive at a rendezvous in time."""


class ServeError(FTError):
    """A service could not be started, reached or changed."""


class ServiceUnavailable(ServeError):
    """No replica of a service can answer and it has no fallback."""


class Overloaded(ServeError):
    """A service's queue is full: the request was refused at once, not queued."""


class DeadlineExceeded(ServeError, TimeoutError):
    """No replica answered a request within its deadline."""


class InputRejected(ServeError, ValueError):
    """The model raised on this input: the caller's error, not retried elsewhere."""


class RequestTooLarge(InputRejected):
    """A request over the service's ``max_request_bytes``, refused before it was sent."""


class PoisonRequest(ServeError):
    """A request lost its replica, and re-sent, it killed the fork of another replica
    it ran alone in (or, where replicas cannot fork, a second replica): it is not sent
    again, and fails alone (the input is likely what takes processes down)."""


class ServiceClosed(ServeError):
    """The service was closed (or this handle detached) before the call."""


class EventError(FTError):
    """An event could not be encoded or decoded."""


class AggregationError(FTError, ValueError):
    """A robust aggregator asked to tolerate more bad workers than its rule can."""


class PlanError(FTError, ValueError):
    """A failure rate, save cost or target a checkpoint plan cannot use."""


class UnsafeName(FTError, ValueError):
    """A user-given name (run, snapshot, service) cannot be used as part of a path."""
