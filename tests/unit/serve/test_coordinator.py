"""The coordinator's entry point: an action is a :class:`ServiceAction`, an unknown one
is refused with the ones this scheduler knows; its table speaks plain strings."""

from __future__ import annotations

import asyncio
from typing import Any

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


class _Placing(ServiceCoordinator):
    """The coordinator's placement rules against a scheduler of named workers; replicas
    are started and stopped on paper (recorded), never on a worker."""

    def __init__(self, workers: list[str]) -> None:
        super().__init__()
        from types import SimpleNamespace

        self.scheduler = SimpleNamespace(
            workers={f"tcp://{w}": SimpleNamespace(name=w) for w in workers}
        )
        self.control = SimpleNamespace(hold=lambda key: None, release=lambda key: None)
        self.stopped: list[str] = []

    def _spawn(self, coro: object) -> None:
        coro.close()  # type: ignore[attr-defined]

    def _publish(self, service: object, payload: object) -> None:
        pass

    def _stop_slot(self, service: Any, slot: Slot, cause: str) -> None:
        self.stopped.append(f"{service.name}/{slot.index}")
        super()._stop_slot(service, slot, cause)

    def ready_all(self) -> dict[str, int]:
        """Every placed replica ready; replicas per worker."""
        per: dict[str, int] = {}
        for slot in self.services["svc"].slots.values():
            if slot.state is ReplicaState.WARMING:
                slot.state = ReplicaState.READY
            if slot.state is ReplicaState.READY:
                per[slot.worker] = per.get(slot.worker, 0) + 1
        self._changed(self.services["svc"])
        return per


def test_replicas_placed_while_a_worker_was_away_spread_again_when_it_is_back() -> None:
    """replicas=5 a second after a worker restart put 3 and 2 on the two live workers,
    and the third got none when it came back."""
    coordinator = _Placing(["a", "b"])  # "c" is restarting
    coordinator.create(name="svc", factory=b"", replicas=5, routing={})
    assert coordinator.ready_all() == {"a": 3, "b": 2}
    coordinator.scheduler.workers["tcp://c"] = type("W", (), {"name": "c"})()
    coordinator.on_membership("joined", "c", "tcp://c", "")
    assert coordinator.stopped == ["svc/4"]  # the newest of a (0, 2, 4); b keeps 1 and 3
    assert coordinator.ready_all() == {"a": 2, "b": 2, "c": 1}
    assert coordinator.services["svc"].health.value == "HEALTHY"
    coordinator.on_membership("joined", "c", "tcp://c", "")  # nothing more to move
    assert coordinator.stopped == ["svc/4"]
