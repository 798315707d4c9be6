"""The cluster section of the configuration: defaults, and a clear error per bad value."""

from __future__ import annotations

from collections.abc import Iterator

import dask.config
import pytest

from ft_notebook.config import load_config, parse_gpus, reload_config
from ft_notebook.exceptions import ConfigError


@pytest.fixture(autouse=True)
def _fresh_config() -> Iterator[None]:
    yield
    reload_config()


def test_cluster_defaults() -> None:
    cfg = load_config().cluster
    assert (cfg.hung_after_s, cfg.workers, cfg.gpus, cfg.port) == (2.0, None, "auto", 0)
    # off: plain HTTP without a login, readable by any other user of the machine
    assert (cfg.dashboard_port, cfg.start_timeout_s, cfg.connect_timeout_s) == (None, 120.0, 15.0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "auto"),
        ("AUTO", "auto"),
        ("none", "none"),
        ("all", "all"),
        (1, ("1",)),
        ("0,2", ("0", "2")),
        ([0, "GPU-abc"], ("0", "GPU-abc")),
        ((3,), ("3",)),  # DASK_..._GPUS=0,3 arrives as a tuple
        ([], "none"),
    ],
)
def test_gpus_accepts_keywords_indices_and_uuids(value: object, expected: object) -> None:
    assert parse_gpus(value) == expected


@pytest.mark.parametrize("bad", [True, -1, 1.5, [None], ["0", ""], {"a": 1}])
def test_bad_gpus_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="GPU index"):
        parse_gpus(bad, key="ft-notebook.cluster.gpus")


@pytest.mark.parametrize(
    ("key", "bad", "match"),
    [
        ("workers", 0, "'auto' or a whole number"),
        ("workers", "many", "'auto' or a whole number"),
        ("workers", True, "'auto' or a whole number"),
        ("port", 70000, "port number"),
        ("port", None, "port number"),
        ("dashboard-port", -1, "or null"),
        ("hung-after", "0s", "positive duration"),
        ("connect-timeout", "soon", "positive duration"),
        ("gpus", 2.5, "GPU index"),
    ],
)
def test_bad_cluster_values_name_the_key(key: str, bad: object, match: str) -> None:
    with (
        dask.config.set({f"ft-notebook.cluster.{key}": bad}),
        pytest.raises(ConfigError, match=match) as info,
    ):
        load_config()
    assert f"ft-notebook.cluster.{key}" in str(info.value)


def test_good_cluster_values_are_read() -> None:
    with dask.config.set(
        {
            "ft-notebook.cluster.workers": 3,
            "ft-notebook.cluster.gpus": "0,1",
            "ft-notebook.cluster.dashboard-port": None,
            "ft-notebook.cluster.hung-after": "750ms",
        }
    ):
        cfg = load_config().cluster
    assert (cfg.workers, cfg.gpus, cfg.dashboard_port, cfg.hung_after_s) == (
        3,
        ("0", "1"),
        None,
        0.75,
    )
