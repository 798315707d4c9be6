from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dask.config
import pytest

from ft_notebook.config import (
    cluster_dask_config,
    data_dir_setting,
    defaults_module,
    get_config,
    load_config,
    reload_config,
)
from ft_notebook.exceptions import ConfigError


@pytest.fixture(autouse=True)
def _fresh_config() -> Iterator[None]:
    yield
    reload_config()


def test_defaults_come_from_the_yaml() -> None:
    cfg = load_config()
    assert cfg.events.transport == "auto"
    assert cfg.cluster.heartbeat_interval_s == 0.5
    assert cfg.cluster.idle_timeout_s == 30 * 60
    assert cfg.cluster.interface is None


def test_the_compiled_defaults_are_the_yaml_file() -> None:
    # _defaults.py spares every %load_ext the YAML parse; it must say what the file says
    import yaml

    from ft_notebook import _defaults

    yaml_file = Path(_defaults.__file__).with_name("ft_notebook.yaml")
    assert yaml.safe_load(yaml_file.read_text()) == _defaults.DEFAULTS, (
        "ft_notebook.yaml changed: run .venv/bin/python -m ft_notebook.config > "
        "ft_notebook/_defaults.py"
    )
    assert Path(_defaults.__file__).read_text() == defaults_module()


def test_the_data_dir_alone_is_the_one_get_config_reads(tmp_path: Path) -> None:
    # %ft restore reads only the data folder; it must never disagree with get_config()
    with dask.config.set({"ft-notebook.data-dir": str(tmp_path / "a")}):
        reload_config()
        assert data_dir_setting() == get_config().data_dir == tmp_path / "a"
        get_config.cache_clear()  # as in a fresh process: the folder alone is read
        assert data_dir_setting() == tmp_path / "a"
        with dask.config.set({"ft-notebook.data-dir": str(tmp_path / "b")}):
            assert data_dir_setting() == tmp_path / "a"  # read once, like get_config()
            # the rest read later, after the change: the folder stays the one in use
            assert get_config().data_dir == tmp_path / "a"
            assert get_config().events.transport == "auto"
            reload_config()
            assert data_dir_setting() == get_config().data_dir == tmp_path / "b"


def test_the_test_session_never_uses_the_real_data_dir() -> None:
    assert get_config().data_dir == Path(os.environ["DASK_FT_NOTEBOOK__DATA_DIR"])
    assert Path.home() not in get_config().data_dir.parents


def test_environment_overrides_reach_a_new_process(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        DASK_FT_NOTEBOOK__EVENTS__TRANSPORT="local",
        DASK_FT_NOTEBOOK__CLUSTER__IDLE_TIMEOUT="90s",
        DASK_FT_NOTEBOOK__DATA_DIR=str(tmp_path / "elsewhere"),
    )
    code = (
        "from ft_notebook.config import get_config as g; c = g(); "
        "print(c.events.transport, c.cluster.idle_timeout_s, c.data_dir)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["local", "90.0", str(tmp_path / "elsewhere")]


def test_config_is_read_once_until_reloaded() -> None:
    before = get_config()
    with dask.config.set({"ft-notebook.events.transport": "local"}):
        assert get_config() is before
        assert reload_config().events.transport == "local"


def test_bad_choice_names_key_value_and_allowed_values() -> None:
    with (
        dask.config.set({"ft-notebook.events.transport": "carrier-pigeon"}),
        pytest.raises(ConfigError) as info,
    ):
        load_config()
    message = str(info.value)
    assert "ft-notebook.events.transport" in message
    assert "'carrier-pigeon'" in message
    for allowed in ("'auto'", "'local'", "'dask'"):
        assert allowed in message
    assert "DASK_FT_NOTEBOOK__EVENTS__TRANSPORT" in message
    assert info.value.allowed == ("auto", "local", "dask")


def test_a_retired_setting_left_in_a_config_names_what_replaced_it() -> None:
    """``train.group-timeout`` was split in two; a value of it must not be ignored."""
    with (
        dask.config.set({"ft-notebook.train.group-timeout": "60s"}),
        pytest.raises(ConfigError) as info,
    ):
        load_config()
    message = str(info.value)
    assert "ft-notebook.train.group-timeout" in message
    assert "train.rendezvous-timeout" in message
    assert "train.collective-timeout" in message


def test_float64_sums_left_in_a_config_is_refused_naming_ordered_sums() -> None:
    with (
        dask.config.set({"ft-notebook.train.float64-sums": False}),
        pytest.raises(ConfigError, match=r"float64-sums.*train\.ordered-sums"),
    ):
        load_config()


@pytest.mark.parametrize("bad", ["soon", "-5s", 0, None])
def test_bad_duration_is_a_config_error(bad: object) -> None:
    with (
        dask.config.set({"ft-notebook.cluster.heartbeat-interval": bad}),
        pytest.raises(ConfigError, match=r"ft-notebook\.cluster\.heartbeat-interval"),
    ):
        load_config()


def test_clusters_we_start_leave_malloc_trim_unset() -> None:
    with dask.config.set(cluster_dask_config()):
        from distributed.nanny import _get_env_variables

        env = _get_env_variables("distributed.nanny.pre-spawn-environ")
    assert "MALLOC_TRIM_THRESHOLD_" not in env
    assert dask.config.get("distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_") == 65536


def test_chaos_actions_are_off_by_default_and_must_be_a_boolean() -> None:
    assert load_config().server.chaos_actions is False
    with (
        dask.config.set({"ft-notebook.server.chaos-actions": "yes"}),
        pytest.raises(ConfigError, match=r"'yes'; expected one of True, False"),
    ):
        load_config()


def test_defaults_hold_when_a_dask_config_set_took_the_section_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A dask.config.set that created the section removes all of it on exit, our
    # registered defaults included; reading must not depend on them being there.
    key = dask.config.canonical_name("ft-notebook", dask.config.config)
    monkeypatch.delitem(dask.config.config, key)
    with dask.config.set({"ft-notebook.cluster.port": 4321}):
        cfg = load_config()
    assert cfg.cluster.port == 4321
    assert cfg.cluster.heartbeat_interval_s == 0.5
    assert load_config().cluster.port == 0
