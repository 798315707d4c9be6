"""ft.fit hands its plugins to the cluster once, and a connection to the scheduler
that closes under it is asked again (both plugins are idempotent); any other failure
is a TrainingError that says what the cluster needs, and one that keeps closing says so."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from distributed.comm.core import CommClosedError

from ft_notebook.exceptions import TrainingError
from ft_notebook.train.kernel._fit import _PLUGIN_TRIES, _install_plugins


class _Client:
    """Fails the first ``fails`` registrations with ``error``, then takes them."""

    def __init__(self, fails: int, error: Exception) -> None:
        self.fails, self.error = fails, error
        self.registered: list[str] = []
        self.scheduler = SimpleNamespace(address="tls://127.0.0.1:1")

    def register_plugin(self, plugin: Any) -> None:
        if self.fails:
            self.fails -= 1
            raise self.error
        self.registered.append(type(plugin).__name__)


def test_a_connection_closed_under_it_is_asked_again() -> None:
    client = _Client(1, CommClosedError("in <TLS (closed) ConnectionPool>: Stream is closed"))
    _install_plugins(client)
    assert client.registered == ["RankHandlers", "RunCoordinator"]


def test_a_connection_that_keeps_closing_is_a_training_error() -> None:
    client = _Client(_PLUGIN_TRIES, CommClosedError("Stream is closed"))
    # what happened and what to do next; not the install advice of another failure
    with pytest.raises(
        TrainingError, match=rf"closed {_PLUGIN_TRIES} times in a row.*Stream is closed"
    ) as e:
        _install_plugins(client)
    assert "%ft cluster status" in str(e.value)
    assert "need ft_notebook installed" not in str(e.value)
    assert client.registered == []


def test_another_failure_is_not_asked_again() -> None:
    client = _Client(1, ModuleNotFoundError("No module named 'ft_notebook'"))
    with pytest.raises(TrainingError, match="No module named 'ft_notebook'"):
        _install_plugins(client)
    assert client.registered == []
