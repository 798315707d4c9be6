"""Settings of ft_notebook, read once into a frozen object.

Defaults live in ``ft_notebook.yaml`` under the key ``ft-notebook`` (with a compiled
copy in ``_defaults.py``: parsing YAML takes 25 ms of every ``%load_ext``), and users
configure ft_notebook the way they configure Dask: YAML files, ``dask.config.set`` or
environment variables such as ``DASK_FT_NOTEBOOK__DATA_DIR``. Reading them does not
import Dask (a tenth of a second, more than a notebook restore may take): in a
process that has not loaded Dask, :mod:`._config_sources` reads the same files and
variables by Dask's rules; in one that has, ``dask.config`` is read, with the
defaults registered there (so ``dask.config.set`` then :func:`reload_config` works).
Components call :func:`get_config` where they are built, never ``dask.config.get`` in
a hot path. Every value is validated here: a bad one raises
:class:`~ft_notebook.exceptions.ConfigError` naming the key, the value and what is
allowed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import numbers
import os
import sys
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ft_notebook import _config_sources
from ft_notebook.exceptions import ConfigError

if TYPE_CHECKING:
    from ft_notebook._settings import FTConfig

_DEFAULTS_FILE = Path(__file__).with_name("ft_notebook.yaml")
_SECTION = "ft-notebook"


def _unit_seconds() -> dict[str, float]:
    """The units dask.utils.parse_timedelta knows (it lower-cases what it is given)."""
    units: dict[str, float] = dict(s=1, ms=1e-3, us=1e-6, ns=1e-9, m=60, h=3600, d=86400)
    units["w"] = 7 * units["d"]
    for word in ("second", "minute", "hour", "day", "week"):
        units[word] = units[word + "s"] = units[word[0]]
    for prefix, short in (("milli", "ms"), ("micro", "us"), ("nano", "ns")):
        units[prefix + "second"] = units[prefix + "seconds"] = units[short]
    return units


_UNIT_SECONDS = _unit_seconds()

EVENT_TRANSPORTS = ("auto", "local", "dask")


GPU_KEYWORDS = ("auto", "none", "all")
#: What a run with a robust aggregator does when too few workers are left for it.
ON_VIOLATION = ("stall", "mean")

DEVICES = ("auto", "cpu", "cuda")
DEVICE_EXPECTED = "'auto', 'cpu', 'cuda' or 'cuda:<index>'"


def load_config() -> FTConfig:
    """Read and validate the current configuration into a new :class:`FTConfig`."""
    from ft_notebook._settings import (
        ClusterConfig,
        EventsConfig,
        FTConfig,
        ServeConfig,
        ServerConfig,
        TrainConfig,
    )

    s = _section()
    _refuse_retired(s)
    return FTConfig(
        data_dir=_data_dir(_get(s, "data-dir")),
        events=EventsConfig(
            transport=_choice(s, "events.transport", EVENT_TRANSPORTS),
        ),
        cluster=ClusterConfig(
            heartbeat_interval_s=_duration(s, "cluster.heartbeat-interval"),
            idle_timeout_s=_duration(s, "cluster.idle-timeout"),
            interface=_optional_str(s, "cluster.interface"),
            hung_after_s=_duration(s, "cluster.hung-after"),
            workers=_workers(s, "cluster.workers"),
            gpus=parse_gpus(_get(s, "cluster.gpus"), key="ft-notebook.cluster.gpus"),
            port=_port(s, "cluster.port", allow_none=False) or 0,
            dashboard_port=_port(s, "cluster.dashboard-port", allow_none=True),
            start_timeout_s=_duration(s, "cluster.start-timeout"),
            connect_timeout_s=_duration(s, "cluster.connect-timeout"),
        ),
        server=ServerConfig(chaos_actions=_bool(s, "server.chaos-actions")),
        train=TrainConfig(
            checkpoint_every=_positive_int(s, "train.checkpoint-every"),
            mtbf_s=_duration(s, "train.mtbf"),
            mtbf_from_journal=_bool(s, "train.mtbf-from-journal"),
            store_keep=_keep(s, "train.store-keep"),
            min_workers=_positive_int(s, "train.min-workers"),
            warmup_timeout_s=_duration(s, "train.warmup-timeout"),
            fast_recovery=_bool(s, "train.fast-recovery"),
            survivor_groups_max_world=_count(s, "train.survivor-groups-max-world"),
            rendezvous_timeout_s=_duration(s, "train.rendezvous-timeout"),
            collective_timeout_s=_duration(s, "train.collective-timeout"),
            stall_factor=_positive_number(s, "train.stall-factor"),
            stall_min_s=_duration(s, "train.stall-min"),
            first_steps_floor_s=_duration(s, "train.first-steps-floor"),
            nonfinite_limit=_positive_int(s, "train.nonfinite-limit"),
            float64_sums=_bool(s, "train.float64-sums"),
            deterministic_chunks=_positive_int(s, "train.deterministic-chunks"),
            device=_device(s, "train.device"),
            amp=_bool(s, "train.amp"),
            on_violation=_choice(s, "train.on-violation", ON_VIOLATION),
        ),
        serve=ServeConfig(
            health_interval_s=_duration(s, "serve.health-interval"),
            health_timeout_s=_duration(s, "serve.health-timeout"),
            deadline_s=_duration(s, "serve.deadline"),
            retries=_count(s, "serve.retries"),
            retry_budget=_fraction(s, "serve.retry-budget"),
            hedge_budget=_fraction(s, "serve.hedge-budget"),
            hedge_after_min_s=_duration(s, "serve.hedge-after-min"),
            breaker_failures=_positive_int(s, "serve.breaker-failures"),
            breaker_open_s=_duration(s, "serve.breaker-open"),
            max_queue=_positive_int(s, "serve.max-queue"),
            warmup_timeout_s=_duration(s, "serve.warmup-timeout"),
        ),
    )


@functools.lru_cache(maxsize=1)
def get_config() -> FTConfig:
    """The configuration of this process, read on first use."""
    # the data folder is the one data_dir_setting() read, which may have come first (a
    # restore reads nothing else): a process keeps using one folder
    return dataclasses.replace(load_config(), data_dir=data_dir_setting())


def reload_config() -> FTConfig:
    """Forget the cached configuration and read it again (tests, long-lived servers)."""
    get_config.cache_clear()
    data_dir_setting.cache_clear()
    return get_config()


def train_setting(name: str) -> Callable[[], Any]:
    """A dataclass ``default_factory``: ``get_config().train.<name>`` when the object is
    built. The specs of ``ft.fit`` take their defaults this way, in the kernel; workers
    unpickle them, which calls no factory, so a run keeps the kernel's values."""
    return lambda: getattr(get_config().train, name)


@functools.lru_cache(maxsize=1)
def data_dir_setting() -> Path:
    """``get_config().data_dir`` without building the rest: a notebook restore needs
    nothing else, and the settings' classes cost it 4 ms to create. (So a bad value of
    another setting does not stop a restore; ``get_config()`` reports it.) Read once,
    like ``get_config()``, until :func:`reload_config`."""
    return _data_dir(_get(_section(), "data-dir"))


def __getattr__(name: str) -> object:
    if name in ("FTConfig", "ClusterConfig", "EventsConfig", "ServerConfig", "TrainConfig"):
        from ft_notebook import _settings

        return getattr(_settings, name)
    raise AttributeError(f"module 'ft_notebook.config' has no attribute {name!r}")


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


@functools.lru_cache(maxsize=1)
def _defaults() -> Mapping[str, Any]:
    # ft_notebook.yaml, as a Python literal; a unit test holds the two equal
    from ft_notebook._defaults import DEFAULTS

    return DEFAULTS


def defaults_module() -> str:
    """The source of ``_defaults.py``: ``ft_notebook.yaml`` as a Python literal."""
    loaded = _config_sources.load_yaml(_DEFAULTS_FILE)
    assert loaded is not None, f"{_DEFAULTS_FILE} is empty"
    return (
        '"""ft_notebook.yaml as a Python literal: generated, do not edit.\n\n'
        "Importing this compiled module costs nothing next to parsing the YAML (and\n"
        "importing PyYAML), 25 ms of every ``%load_ext ft_notebook``. After editing\n"
        "ft_notebook.yaml, regenerate it (a unit test fails until then)::\n\n"
        "    .venv/bin/python -m ft_notebook.config > ft_notebook/_defaults.py\n"
        '"""\n\n'
        f"DEFAULTS = {_literal(loaded)}\n"
    )


def _literal(value: Any, indent: str = "") -> str:
    """``value`` as Python source laid out the way ``ruff format`` leaves it."""
    if isinstance(value, dict):
        inner = indent + "    "
        items = "".join(f"{inner}{_literal(k)}: {_literal(v, inner)},\n" for k, v in value.items())
        return "{\n" + items + indent + "}"
    if isinstance(value, str):
        return json.dumps(value)  # double quotes, as ruff writes them
    assert value is None or isinstance(value, (bool, int, float)), value
    return repr(value)


def _section() -> dict[str, Any]:
    """The ``ft-notebook`` settings now: Dask's if this process loaded Dask, else the
    same files and environment variables read without it."""
    defaults = _defaults()
    if "dask" not in sys.modules:
        merged = _config_sources.collect(defaults)
    else:
        import dask.config

        if not any(d is defaults for d in dask.config.defaults):
            dask.config.update_defaults(defaults)
        # a dask.config.set that added the section took our defaults with it on exit:
        # lay Dask's values over the defaults rather than trust they are still there
        merged = _config_sources.update({}, defaults)
        _config_sources.update(merged, {_SECTION: dask.config.get(_SECTION, default={})})
    section = _config_sources.get(merged, _SECTION)
    assert isinstance(section, dict)
    return section


#: Settings that no longer exist -> what replaced them: a value left in a user's file
#: must not be ignored without a word.
RETIRED = {
    "train.group-timeout": "train.rendezvous-timeout (a group's setup, 30s) and "
    "train.collective-timeout (one collective, 600s)",
}


def _refuse_retired(section: Mapping[str, Any]) -> None:
    for key, instead in RETIRED.items():
        try:
            value = _get(section, key)
        except (KeyError, TypeError):
            continue
        raise ConfigError(
            f"ft-notebook.{key}", value, expected=f"no value: it was split into {instead}"
        )


def _get(section: Mapping[str, Any], key: str) -> Any:
    return _config_sources.get(section, key)


def _choice(section: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = _get(section, key)
    if value not in allowed:
        raise ConfigError(f"ft-notebook.{key}", value, allowed=allowed)
    return str(value)


def _duration(section: Mapping[str, Any], key: str) -> float:
    value = _get(section, key)
    try:
        seconds = _parse_seconds(value)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        seconds = None
    if seconds is None or seconds <= 0:
        raise ConfigError(
            f"ft-notebook.{key}", value, expected="a positive duration such as '500ms'"
        )
    return float(seconds)


def _parse_seconds(value: Any) -> float | None:
    """``dask.utils.parse_timedelta(value)``, without importing Dask: "500ms", "2
    minutes", 3 (seconds) or a timedelta; raises what it raises for anything else."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    text = str(value) if isinstance(value, numbers.Number) else value
    text = text.replace(" ", "")
    if not text[0].isdigit():
        text = "1" + text
    unit_at = len(text)
    while unit_at > 0 and text[unit_at - 1].isalpha():
        unit_at -= 1
    unit = text[unit_at:] or "seconds"
    multiplier = _UNIT_SECONDS.get(unit.lower())
    if multiplier is None:
        raise KeyError(f"Invalid time unit: {unit}")
    return float(text[:unit_at]) * multiplier


def _bool(section: Mapping[str, Any], key: str) -> bool:
    value = _get(section, key)
    if isinstance(value, bool):
        return value
    raise ConfigError(f"ft-notebook.{key}", value, allowed=(True, False))


def _optional_str(section: Mapping[str, Any], key: str) -> str | None:
    value = _get(section, key)
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


def _positive_number(section: Mapping[str, Any], key: str) -> float:
    value = _get(section, key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise ConfigError(f"ft-notebook.{key}", value, expected="a positive number")


def _positive_int(section: Mapping[str, Any], key: str) -> int:
    value = _get(section, key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ConfigError(f"ft-notebook.{key}", value, expected="a whole number >= 1")


def _keep(section: Mapping[str, Any], key: str) -> int | None:
    value = _get(section, key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ConfigError(
        f"ft-notebook.{key}", value, expected="a whole number >= 1, or null to keep all"
    )


def is_device(value: Any) -> bool:
    """Whether ``value`` names a device a rank can train on: ``"auto"``, ``"cpu"``,
    ``"cuda"`` (the worker's GPU) or ``"cuda:<index>"`` (ranks use gloo on a CPU
    and NCCL on a CUDA device, and nothing else)."""
    if not isinstance(value, str):
        return False
    kind, _, index = value.partition(":")
    if not index:
        return value in DEVICES
    return kind == "cuda" and index.isdigit() and index.isascii()


def _device(section: Mapping[str, Any], key: str) -> str:
    value = _get(section, key)
    if is_device(value):
        return str(value)
    raise ConfigError(f"ft-notebook.{key}", value, expected=DEVICE_EXPECTED)


def _count(section: Mapping[str, Any], key: str) -> int:
    value = _get(section, key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ConfigError(f"ft-notebook.{key}", value, expected="a whole number >= 0")


def _fraction(section: Mapping[str, Any], key: str) -> float:
    value = _get(section, key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    raise ConfigError(f"ft-notebook.{key}", value, expected="a fraction from 0 to 1")


def _workers(section: Mapping[str, Any], key: str) -> int | None:
    value = _get(section, key)
    if value == "auto":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ConfigError(f"ft-notebook.{key}", value, expected="'auto' or a whole number >= 1")


def _port(section: Mapping[str, Any], key: str, *, allow_none: bool) -> int | None:
    value = _get(section, key)
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


if __name__ == "__main__":
    print(defaults_module(), end="")
