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


@dataclass(frozen=True)
class ClusterConfig:
    heartbeat_interval_s: float
    idle_timeout_s: float
    interface: str | None


@dataclass(frozen=True)
class FTConfig:
    data_dir: Path
    events: EventsConfig
    cluster: ClusterConfig


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


def _optional_str(key: str) -> str | None:
    value = _get(key)
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"ft-notebook.{key}", value, expected="a string or null")


def _data_dir(value: Any) -> Path:
    if value is None:
        base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
        return Path(base) / "ft-notebook"
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError("ft-notebook.data-dir", value, expected="a folder path or null")
    return Path(value).expanduser()
