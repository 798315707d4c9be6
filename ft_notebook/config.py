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
a hot path. Every value is validated as it is read, by the reader of its kind in
:mod:`._config_values`: a bad one raises :class:`~ft_notebook.exceptions.ConfigError`
naming the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ft_notebook import _config_sources
from ft_notebook import _config_values as read
from ft_notebook._config_values import DEVICE_EXPECTED as DEVICE_EXPECTED
from ft_notebook._config_values import DEVICES as DEVICES
from ft_notebook._config_values import GPU_KEYWORDS as GPU_KEYWORDS
from ft_notebook._config_values import is_device as is_device
from ft_notebook._config_values import parse_gpus as parse_gpus
from ft_notebook.exceptions import ConfigError

if TYPE_CHECKING:
    from ft_notebook._settings import FTConfig

_DEFAULTS_FILE = Path(__file__).with_name("ft_notebook.yaml")
_SECTION = "ft-notebook"

EVENT_TRANSPORTS = ("auto", "local", "dask")
#: How a cluster's nannies start worker processes (see ft_notebook.cluster._forkserver).
WORKER_STARTS = ("forkserver", "spawn")
#: What a run with a robust aggregator does when too few workers are left for it.
ON_VIOLATION = ("stall", "mean")


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
        data_dir=read.data_dir(_config_sources.get(s, "data-dir")),
        events=EventsConfig(
            transport=read.choice(s, "events.transport", EVENT_TRANSPORTS),
        ),
        cluster=ClusterConfig(
            heartbeat_interval_s=read.duration(s, "cluster.heartbeat-interval"),
            idle_timeout_s=read.duration(s, "cluster.idle-timeout"),
            interface=read.optional_str(s, "cluster.interface"),
            hung_after_s=read.duration(s, "cluster.hung-after"),
            workers=read.workers(s, "cluster.workers"),
            gpus=read.gpus(s, "cluster.gpus"),
            port=read.port(s, "cluster.port", allow_none=False) or 0,
            dashboard_port=read.port(s, "cluster.dashboard-port", allow_none=True),
            start_timeout_s=read.duration(s, "cluster.start-timeout"),
            connect_timeout_s=read.duration(s, "cluster.connect-timeout"),
            worker_start=read.choice(s, "cluster.worker-start", WORKER_STARTS),
        ),
        server=ServerConfig(chaos_actions=read.boolean(s, "server.chaos-actions")),
        train=TrainConfig(
            checkpoint_every=read.positive_int(s, "train.checkpoint-every"),
            mtbf_s=read.duration(s, "train.mtbf"),
            mtbf_from_journal=read.boolean(s, "train.mtbf-from-journal"),
            store_keep=read.keep(s, "train.store-keep"),
            min_workers=read.positive_int(s, "train.min-workers"),
            warmup_timeout_s=read.duration(s, "train.warmup-timeout"),
            fast_recovery=read.boolean(s, "train.fast-recovery"),
            survivor_groups_max_world=read.count(s, "train.survivor-groups-max-world"),
            rendezvous_timeout_s=read.duration(s, "train.rendezvous-timeout"),
            collective_timeout_s=read.duration(s, "train.collective-timeout"),
            stall_factor=read.positive_number(s, "train.stall-factor"),
            stall_min_s=read.duration(s, "train.stall-min"),
            first_steps_floor_s=read.duration(s, "train.first-steps-floor"),
            nonfinite_limit=read.positive_int(s, "train.nonfinite-limit"),
            ordered_sums=read.boolean(s, "train.ordered-sums"),
            deterministic_chunks=read.positive_int(s, "train.deterministic-chunks"),
            device=read.device(s, "train.device"),
            amp=read.boolean(s, "train.amp"),
            on_violation=read.choice(s, "train.on-violation", ON_VIOLATION),
        ),
        serve=ServeConfig(
            health_interval_s=read.duration(s, "serve.health-interval"),
            health_timeout_s=read.duration(s, "serve.health-timeout"),
            deadline_s=read.duration(s, "serve.deadline"),
            retries=read.count(s, "serve.retries"),
            retry_budget=read.fraction(s, "serve.retry-budget"),
            hedge_budget=read.fraction(s, "serve.hedge-budget"),
            hedge_after_min_s=read.duration(s, "serve.hedge-after-min"),
            breaker_failures=read.positive_int(s, "serve.breaker-failures"),
            breaker_open_s=read.duration(s, "serve.breaker-open"),
            max_queue=read.positive_int(s, "serve.max-queue"),
            warmup_timeout_s=read.duration(s, "serve.warmup-timeout"),
            max_request_bytes=read.size_or_auto(s, "serve.max-request-bytes"),
            hedge_max_bytes=read.size(s, "serve.hedge-max-bytes"),
            fallback_rate=read.rate(s, "serve.fallback-rate"),
            sandbox=read.boolean(s, "serve.sandbox"),
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
    return read.data_dir(_config_sources.get(_section(), "data-dir"))


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
    "train.group-timeout": "it was split into train.rendezvous-timeout (a group's setup, "
    "30s) and train.collective-timeout (one collective, 600s)",
    "train.float64-sums": "it became train.ordered-sums (the parts are added in part "
    "order, in float32 on a CPU)",
}


def _refuse_retired(section: Mapping[str, Any]) -> None:
    for key, instead in RETIRED.items():
        try:
            value = _config_sources.get(section, key)
        except (KeyError, TypeError):
            continue
        raise ConfigError(f"ft-notebook.{key}", value, expected=f"no value: {instead}")


if __name__ == "__main__":
    print(defaults_module(), end="")
