"""Settings of ft_notebook, read once into a frozen object.

Defaults live in ``ft_notebook.yaml`` and are registered with ``dask.config`` under
the key ``ft-notebook``, so users configure ft_notebook the way they configure Dask:
YAML files, ``dask.config.set`` or environment variables such as
``DASK_FT_NOTEBOOK__DATA_DIR``. Components call :func:`get_config` where they are
built, never ``dask.config.get`` in a hot path. Every value is validated here: a bad
one raises :class:`~ft_notebook.exceptions.ConfigError` naming the key, the value and
what is allowed.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.config
import yaml
from dask.utils import parse_timedelta

from ft_notebook.exceptions import ConfigError

_DEFAULTS_FILE = Path(__file__).with_name("ft_notebook.yaml")
with _DEFAULTS_FILE.open() as _f:
    dask.config.update_defaults(yaml.safe_load(_f))

EVENT_TRANSPORTS = ("auto", "local", "dask")


@dataclass(frozen=True)
class EventsConfig:
    transport: str


GPU_KEYWORDS = ("auto", "none", "all")


@dataclass(frozen=True)
class ClusterConfig:
    heartbeat_interval_s: float
    idle_timeout_s: float
    interface: str | None
    hung_after_s: float = 2.0
    #: CPU worker processes; None means "auto" (fits the cores).
    workers: int | None = None
    #: "auto", "none", "all", or GPU indices / UUIDs as strings.
    gpus: str | tuple[str, ...] = "auto"
    port: int = 0
    #: None: no dashboard; 0: a free port.
    dashboard_port: int | None = 0
    start_timeout_s: float = 120.0
    connect_timeout_s: float = 15.0


@dataclass(frozen=True)
class TrainConfig:
    #: A step that has not advanced for max(stall_min_s, stall_factor x the median
    #: step time) is a hang even while heartbeats go on; the first steps get
    #: first_steps_floor_s, since they include compilation and warm-up.
    stall_factor: float = 30.0
    stall_min_s: float = 10.0
    first_steps_floor_s: float = 300.0
    #: Non-finite steps skipped in a row before the run rolls back.
    nonfinite_limit: int = 3


@dataclass(frozen=True)
class ServerConfig:
    chaos_actions: bool


@dataclass(frozen=True)
class FTConfig:
    data_dir: Path
    events: EventsConfig
    cluster: ClusterConfig
    server: ServerConfig
    train: TrainConfig = TrainConfig()


def load_config() -> FTConfig:
    """Read and validate the current dask.config into a new :class:`FTConfig`."""
    return FTConfig(
        data_dir=_data_dir(_get("data-dir")),
        events=EventsConfig(
            transport=_choice("events.transport", EVENT_TRANSPORTS),
        ),
        cluster=ClusterConfig(
            heartbeat_interval_s=_duration("cluster.heartbeat-interval"),
            idle_timeout_s=_duration("cluster.idle-timeout"),
            interface=_optional_str("cluster.interface"),
            hung_after_s=_duration("cluster.hung-after"),
            workers=_workers("cluster.workers"),
            gpus=parse_gpus(_get("cluster.gpus"), key="ft-notebook.cluster.gpus"),
            port=_port("cluster.port", allow_none=False) or 0,
            dashboard_port=_port("cluster.dashboard-port", allow_none=True),
            start_timeout_s=_duration("cluster.start-timeout"),
            connect_timeout_s=_duration("cluster.connect-timeout"),
        ),
        server=ServerConfig(chaos_actions=_bool("server.chaos-actions")),
        train=TrainConfig(
            stall_factor=_positive_number("train.stall-factor"),
            stall_min_s=_duration("train.stall-min"),
            first_steps_floor_s=_duration("train.first-steps-floor"),
            nonfinite_limit=_workers_like("train.nonfinite-limit"),
        ),
    )


@functools.lru_cache(maxsize=1)
def get_config() -> FTConfig:
    """The configuration of this process, read on first use."""
    return load_config()


def reload_config() -> FTConfig:
    """Forget the cached configuration and read it again (tests, long-lived servers)."""
    get_config.cache_clear()
    return get_config()


def cluster_dask_config() -> dict[str, Any]:
    """Dask settings for every cluster ft_notebook starts.

    Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536`` in each worker, which slows
    torch by about 20%; ``None`` makes the nanny leave it unset.
    """
    # distributed registers its defaults on import; a key set before that would be
    # shadowed by them, and the enclosing dask.config.set would restore a tree
    # without them.
    import distributed  # noqa: F401

    return {
        "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
    }


def _get(key: str) -> Any:
    return dask.config.get(f"ft-notebook.{key}")


def _choice(key: str, allowed: tuple[str, ...]) -> str:
    value = _get(key)
    if value not in allowed:
        raise ConfigError(f"ft-notebook.{key}", value, allowed=allowed)
    return str(value)


def _duration(key: str) -> float:
    value = _get(key)
    try:
        seconds = parse_timedelta(value, default="s")
    except (TypeError, ValueError, KeyError):
        seconds = None
    if seconds is None or seconds <= 0:
        raise ConfigError(
            f"ft-notebook.{key}", value, expected="a positive duration such as '500ms'"
        )
    return float(seconds)


def _bool(key: str) -> bool:
    value = _get(key)
    if isinstance(value, bool):
        return value
    raise ConfigError(f"ft-notebook.{key}", value, allowed=(True, False))


def _optional_str(key: str) -> str | None:
    value = _get(key)
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"ft-notebook.{key}", value, expected="a string or null")


def parse_gpus(value: Any, *, key: str = "gpus") -> str | tuple[str, ...]:
    """Normalise a ``gpus`` setting: a keyword, or GPU indices / UUIDs as strings.

    Accepts ``"auto"``, ``"none"``, ``"all"``, an index (``1``), a comma-separated
    string (``"0,2"``) or a list of indices and UUIDs; an empty list means "none".
    """
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value.strip().lower() in GPU_KEYWORDS:
            return value.strip().lower()
        value = [v for v in value.split(",") if v.strip()]
    elif isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, (list, tuple)):
        tokens = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, (int, str)):
                break
            token = str(item).strip()
            if not token or (isinstance(item, int) and item < 0):
                break
            tokens.append(token)
        else:
            return tuple(tokens) if tokens else "none"
    raise ConfigError(
        key,
        value,
        expected="'auto', 'none', 'all', a GPU index, or a list of indices or GPU UUIDs",
    )


def _positive_number(key: str) -> float:
    value = _get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise ConfigError(f"ft-notebook.{key}", value, expected="a positive number")


def _workers_like(key: str) -> int:
    value = _get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ConfigError(f"ft-notebook.{key}", value, expected="a whole number >= 1")


def _workers(key: str) -> int | None:
    value = _get(key)
    if value == "auto":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ConfigError(f"ft-notebook.{key}", value, expected="'auto' or a whole number >= 1")


def _port(key: str, *, allow_none: bool) -> int | None:
    value = _get(key)
    if value is None and allow_none:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 65535:
        return value
    expected = "a port number from 0 (any free port) to 65535"
    raise ConfigError(
        f"ft-notebook.{key}", value, expected=expected + (" or null" if allow_none else "")
    )


def _data_dir(value: Any) -> Path:
    if value is None:
        base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
        return Path(base) / "ft-notebook"
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError("ft-notebook.data-dir", value, expected="a folder path or null")
    return Path(value).expanduser()
