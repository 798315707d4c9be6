"""The typed settings of ft_notebook: what :func:`ft_notebook.config.get_config` returns.

Kept apart from the reading and validation in :mod:`ft_notebook.config`, and loaded by
the first ``get_config()``: a notebook restore needs only the data folder, and these
classes cost it 4 ms to create.

No field here has a default: ``ft_notebook.yaml`` (checked by its schema) is the one
place a default is written, and :func:`~ft_notebook.config.load_config` fills every
field from it, so a value changed there cannot be shadowed by a second copy here (a
unit test refuses a field default).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EventsConfig:
    """``ft-notebook.events``: how live events travel."""

    transport: str


@dataclass(frozen=True)
class ClusterConfig:
    """``ft-notebook.cluster``: the private clusters ft_notebook starts."""

    heartbeat_interval_s: float
    idle_timeout_s: float
    interface: str | None
    hung_after_s: float
    #: CPU worker processes; None means "auto" (fits the cores).
    workers: int | None
    #: "auto", "none", "all", or GPU indices / UUIDs as strings.
    gpus: str | tuple[str, ...]
    #: 0: a free port.
    port: int
    #: None: no dashboard; 0: a free port.
    dashboard_port: int | None
    start_timeout_s: float
    connect_timeout_s: float
    #: how worker processes start: "forkserver" (from a server with torch imported) or "spawn"
    worker_start: str


@dataclass(frozen=True)
class TrainConfig:
    """``ft-notebook.train``: the settings of ``ft.fit`` (see ``ft_notebook.yaml``).

    ``fit`` takes every argument left out (None) from this object, read in the calling
    kernel, and the run's spec and options then carry the values themselves. The field
    names are those of :class:`~ft_notebook.train.spec.FitSpec` and
    :class:`~ft_notebook.train.spec.RunOptions`, which take their defaults from here.
    """

    checkpoint_every: int
    #: The MTBF checkpoint_every="auto" plans with, in seconds...
    mtbf_s: float
    #: ... unless the cluster's journal recorded enough failures (train._mtbf).
    mtbf_from_journal: bool
    #: Checkpoints kept per run in a store given as a URL (or none); None keeps all.
    store_keep: int | None
    min_workers: int
    warmup_timeout_s: float
    fast_recovery: bool
    #: Survivor groups are prepared while a run trains on at most this many workers.
    survivor_groups_max_world: int
    #: How long a group's setup waits for its peers, and how long a collective may.
    rendezvous_timeout_s: float
    collective_timeout_s: float
    #: A step that has not advanced for max(stall_min_s, stall_factor x the median
    #: step time) is a hang even while heartbeats go on; the first steps get
    #: first_steps_floor_s, since they include compilation and warm-up.
    stall_factor: float
    stall_min_s: float
    first_steps_floor_s: float
    #: Non-finite steps skipped in a row before the run rolls back.
    nonfinite_limit: int
    #: Add the gradients of fixed parts in part order, whatever the world size.
    ordered_sums: bool
    #: deterministic=True: micro-chunks per batch when chunk_size is not given.
    deterministic_chunks: int
    #: "auto", "cpu", "cuda" or "cuda:<index>".
    device: str
    amp: bool
    #: "stall" or "mean": a robust aggregator's condition failing for the world left.
    on_violation: str


@dataclass(frozen=True)
class ServeConfig:
    """``ft-notebook.serve``: routing, health checks and limits of ``ft.serve``."""

    health_interval_s: float
    health_timeout_s: float
    deadline_s: float
    retries: int
    retry_budget: float
    hedge_budget: float
    hedge_after_min_s: float
    breaker_failures: int
    breaker_open_s: float
    max_queue: int
    warmup_timeout_s: float
    #: None: "auto", a 32nd of the smallest worker's memory limit (see serve())
    max_request_bytes: int | None
    hedge_max_bytes: int
    fallback_rate: float
    #: re-sent requests and hedges run in a fork of their replica (serve/_sandbox.py)
    sandbox: bool


@dataclass(frozen=True)
class ServerConfig:
    """``ft-notebook.server``: the Jupyter server extension."""

    chaos_actions: bool


@dataclass(frozen=True)
class FTConfig:
    """Every setting of ft_notebook, validated (see :func:`ft_notebook.config.get_config`)."""

    data_dir: Path
    events: EventsConfig
    cluster: ClusterConfig
    server: ServerConfig
    train: TrainConfig
    serve: ServeConfig
