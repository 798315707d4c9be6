"""The coordinator's entry point: an action is a :class:`ServiceAction`, an unknown one
is refused with the ones this scheduler knows; its table speaks plain strings."""

from __future__ import annotations

import asyncio

import pytest

from ft_notebook.exceptions import ServeError
from ft_notebook.serve._coordinator import ACTIONS, ServiceCoordinator, Slot
from ft_notebook.serve._protocol import ReplicaState, ServiceAction

pytestmark = pytest.mark.unit


def test_every_action_has_a_handler() -> None:
    assert set(ACTIONS) == set(ServiceAction)


def test_an_unknown_action_is_refused_naming_the_known_ones() -> None:
    coordinator = ServiceCoordinator()
    with pytest.raises(ServeError, match="Unknown service action 'frobnicate'") as caught:
        asyncio.run(coordinator.handle("frobnicate", name="svc"))
    message = str(caught.value)
    assert str(sorted(a.value for a in ServiceAction)) in message
    assert "same ft_notebook version" in message


def test_an_action_arrives_as_its_string_and_is_dispatched() -> None:
    coordinator = ServiceCoordinator()
    assert asyncio.run(coordinator.handle(ServiceAction.NAMES.value)) == []
    with pytest.raises(ServeError, match="No service named 'svc'"):
        asyncio.run(coordinator.handle(ServiceAction.TABLE.value, name="svc"))


def test_a_slot_starts_waiting_and_its_row_carries_the_state_as_a_plain_string() -> None:
    slot = Slot(0)
    assert slot.state is ReplicaState.WAITING
    slot.state = ReplicaState.READY
    row = slot.row("svc")
    assert type(row["state"]) is str  # msgpack and JSON see the string, never the enum
    assert row["state"] == "ready"
    assert row["replica"] == "svc/0"
