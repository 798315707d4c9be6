"""The replica states a service's table speaks are the strings the REST model
documents, and those the event fold shows a replica in (the panel reads them)."""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path

import pytest

from ft_notebook.events import (
    Event,
    ReplicaFailed,
    ReplicaLost,
    ReplicaReady,
    ServiceScaled,
    ServiceStarted,
    history,
    publish,
    service_topic,
)
from ft_notebook.runfold import ServiceView
from ft_notebook.serve._protocol import ReplicaState, ServiceAction
from ft_notebook.server._models import ReplicaModel

pytestmark = pytest.mark.unit


def test_replica_states_are_the_strings_the_rest_model_documents() -> None:
    documented = re.search(r"#: (.+)\n\s+state: str", inspect.getsource(ReplicaModel))
    assert documented is not None, "ReplicaModel.state lost its comment"
    assert [s.value for s in ReplicaState] == documented.group(1).split(" | ")
    assert ReplicaState("ready") is ReplicaState.READY
    row_state: str = "ready"  # as a table's row carries it
    assert row_state == ReplicaState.READY  # a str enum: equal to the plain string


def test_a_replica_is_placed_while_warming_or_ready() -> None:
    assert {s for s in ReplicaState if s.placed} == {ReplicaState.WARMING, ReplicaState.READY}


def test_actions_are_distinct_lowercase_words() -> None:
    values = [a.value for a in ServiceAction]
    assert len(set(values)) == len(values)
    assert all(v.isalpha() and v.islower() for v in values)


def test_the_event_fold_shows_a_replica_only_in_replica_states(
    isolated_data_dir: Path, unique_name: str
) -> None:
    name = unique_name
    for payload in (
        ServiceStarted(3),
        ReplicaReady(f"{name}/0", "w0", "tcp://a", 0.1),
        ReplicaLost(f"{name}/0", "w0", "tcp://a", "worker w0 lost"),
        ReplicaFailed(f"{name}/1", "w1", "ValueError: no GPU"),
        ServiceScaled(4, 3),
    ):
        publish(payload, service_topic(name))
    events: list[Event] = history(service_topic(name))
    view = functools.reduce(ServiceView.apply, events, ServiceView(name))
    shown = {r.state for r in view.replica_rows()}
    assert shown == {"lost", "failed", "waiting"}
    assert shown <= {s.value for s in ReplicaState}
