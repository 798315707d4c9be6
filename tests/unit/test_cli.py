from __future__ import annotations

import json
import subprocess
import sys

import dask.config
import pytest

from ft_notebook import __version__
from ft_notebook.cli import main
from ft_notebook.config import reload_config
from ft_notebook.events import WorkerLost, publish, run_topic


def test_events_prints_the_journal_as_json_lines(
    unique_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = run_topic(unique_name)
    publish(WorkerLost(name="w3", address="tcp://a"), topic)
    publish(WorkerLost(name="w4", address="tcp://b"), topic)
    assert main(["events", topic, "--since", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["data"]["name"] for line in lines] == ["w4"]


def test_config_error_is_a_message_and_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    with dask.config.set({"ft-notebook.events.transport": "smoke-signals"}):
        assert main(["config"]) == 2
    reload_config()
    err = capsys.readouterr().err
    assert err.startswith("ft-notebook: Configuration key 'ft-notebook.events.transport'")
    assert "Traceback" not in err


def test_console_script_is_installed() -> None:
    exe = f"{sys.prefix}/bin/ft-notebook"
    out = subprocess.run([exe, "version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == __version__


@pytest.mark.parametrize(
    "argv", [["cluster", "down", "demo-training"], ["cluster", "down", "--name", "demo-training"]]
)
def test_cluster_down_takes_the_name_as_typed_or_as_an_option(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`ft-notebook cluster down demo-training` was rejected: only --name (issue 38)."""
    assert main(argv) == 0
    assert capsys.readouterr().out == "cluster 'demo-training' was not running\n"


def test_two_different_cluster_names_are_refused_with_the_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["cluster", "down", "a", "--name", "b"])
    assert stop.value.code == 2
    assert "two names, 'a' and --name 'b'" in capsys.readouterr().err
