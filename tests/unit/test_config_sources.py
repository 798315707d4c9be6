"""Reading the configuration without Dask gives what Dask gives.

``ft_notebook.config`` reads Dask's sources itself when Dask is not loaded, so that
``%load_ext ft_notebook`` need not import it. Each test puts the two readers side by
side on the same YAML files and environment.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import dask.config
import pytest
from dask.utils import parse_timedelta

from ft_notebook import _config_sources
from ft_notebook._config_values import parse_seconds
from ft_notebook.config import _defaults


def _dask_collect(defaults: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """What dask.config holds after refresh() with ``defaults`` registered."""
    config: dict[str, Any] = {}
    dask.config.update(config, defaults, priority="old")
    paths = _config_sources.search_paths(env)
    return dask.config.update(config, dask.config.collect(paths=paths, env=env))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _layers(tmp_path: Path) -> dict[str, str]:
    """YAML in the user's folder and in DASK_CONFIG, and environment variables, each
    overriding some of the defaults and some of the layer below; the environment
    of this process is left out, so its DASK_ variables do not leak in."""
    home_cfg = tmp_path / "home" / ".config" / "dask"
    _write(
        home_cfg / "10-user.yaml",
        """
        ft-notebook:
          cluster:
            port: 8786
            idle-timeout: 5 minutes
          events: {transport: dask}
        """,
    )
    _write(home_cfg / "ignored.txt", "ft-notebook: {cluster: {port: 1}}\n")
    _write(
        tmp_path / "site" / "ft.yml",
        """
        ft_notebook:            # the underscore spelling is the same key
          cluster:
            idle_timeout: 7 minutes
            gpus: [0, 2]
          train: {stall-factor: 12}
        """,
    )
    return {
        "HOME": str(tmp_path / "home"),
        "DASK_ROOT_CONFIG": str(tmp_path / "no-root"),
        "DASK_CONFIG": str(tmp_path / "site"),
        "DASK_FT_NOTEBOOK__EVENTS__TRANSPORT": "local",
        "DASK_FT_NOTEBOOK__DATA_DIR": str(tmp_path / "data"),
        "DASK_FT_NOTEBOOK__SERVER__CHAOS_ACTIONS": "true",
        "DASK_FT_NOTEBOOK__CLUSTER__DASHBOARD_PORT": "8787",
        "DASK_FT_NOTEBOOK__CLUSTER__HUNG_AFTER": "3s",
        "PATH": os.environ.get("PATH", ""),
    }


def test_both_readers_merge_defaults_files_and_environment_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _layers(tmp_path)
    monkeypatch.setenv("HOME", env["HOME"])  # expanduser("~") reads the real environment
    ours = _config_sources.collect(_defaults(), env)
    theirs = _dask_collect(dict(_defaults()), env)
    section = _config_sources.get(ours, "ft-notebook")
    assert section == _config_sources.get(theirs, "ft-notebook")
    assert section["events"]["transport"] == "local"  # environment over both files
    assert section["cluster"]["port"] == 8786  # user file over the defaults
    assert section["cluster"]["idle-timeout"] == "7 minutes"  # DASK_CONFIG over user file
    assert section["cluster"]["gpus"] == [0, 2]
    assert section["cluster"]["dashboard-port"] == 8787  # the environment over the default
    assert section["server"]["chaos-actions"] is True
    assert section["train"]["stall-factor"] == 12
    assert section["train"]["nonfinite-limit"] == 3  # untouched default


def test_config_passed_down_by_a_dask_parent_process_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inherited = {"ft-notebook": {"cluster": {"port": 9000, "workers": 2}}}
    env = {
        "HOME": str(tmp_path),
        "DASK_ROOT_CONFIG": str(tmp_path / "none"),
        "DASK_INTERNAL_INHERIT_CONFIG": dask.config.serialize(inherited),
        "DASK_FT_NOTEBOOK__CLUSTER__WORKERS": "3",
    }
    monkeypatch.setenv("HOME", str(tmp_path))
    ours = _config_sources.collect(_defaults(), env)
    assert ours == _dask_collect(dict(_defaults()), env)
    assert ours["ft-notebook"]["cluster"]["port"] == 9000
    assert ours["ft-notebook"]["cluster"]["workers"] == 3  # the variable over the parent
    payload = json.loads(base64.urlsafe_b64decode(env["DASK_INTERNAL_INHERIT_CONFIG"]))
    assert payload == inherited


@pytest.mark.parametrize(
    "raw", ["1", "2.5", "[1, 'a']", "{'a': 1}", "None", "null", "TRUE", "false", "text", "1e3"]
)
def test_environment_values_are_interpreted_as_dask_does(raw: str) -> None:
    assert _config_sources.interpret_value(raw) == dask.config.interpret_value(raw)


def test_a_malformed_file_is_an_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n- at the top\n")
    with pytest.raises(ValueError, match=r"bad\.yaml.*must have a dict"):
        _config_sources.load_yaml(bad)
    with pytest.raises(ValueError, match="must have a dict"):
        dask.config._load_config_file(str(bad))


@pytest.mark.parametrize(
    "value",
    [
        "500ms",
        "2s",
        "30 minutes",
        "1.5h",
        "3 Days",
        "1w",
        "250 milliseconds",
        "10us",
        7,
        0.25,
        "12",
        "ms",
        timedelta(seconds=90),
    ],
)
def test_durations_parse_as_dask_parses_them(value: object) -> None:
    assert parse_seconds(value) == pytest.approx(parse_timedelta(value))


@pytest.mark.parametrize("value", ["soon", "5 fortnights", "", [1]])
def test_bad_durations_fail_in_both(value: object) -> None:
    with pytest.raises((KeyError, ValueError, IndexError, AttributeError)):
        parse_timedelta(value)  # type: ignore[arg-type]
    with pytest.raises((KeyError, ValueError, IndexError, AttributeError)):
        parse_seconds(value)


_BOTH_WAYS = """
import sys
from ft_notebook.config import load_config
without = load_config()
assert "dask" not in sys.modules, "reading the config imported dask"
import dask.config
with_dask = load_config()
print(repr(without))
print(repr(with_dask))
dask.config.set({"ft-notebook.cluster.port": 4242})
print(load_config().cluster.port)
"""


def test_a_fresh_process_reads_the_same_config_with_and_without_dask(tmp_path: Path) -> None:
    env = _layers(tmp_path)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", _BOTH_WAYS], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    without, with_dask, port = out.stdout.splitlines()
    assert without == with_dask
    assert "transport='local'" in without
    assert "idle_timeout_s=420.0" in without  # "7 minutes" from DASK_CONFIG
    assert "hung_after_s=3.0" in without
    assert "gpus=('0', '2')" in without
    assert "chaos_actions=True" in without
    assert f"data_dir=PosixPath('{tmp_path / 'data'}')" in without
    assert port == "4242"  # once Dask is loaded, dask.config.set counts
