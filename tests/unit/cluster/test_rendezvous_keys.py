"""The rendezvous store in the scheduler: it forgets the keys of groups that will
never meet again, bounds its memory, and its waits end."""

from __future__ import annotations

import asyncio
import time

import pytest

from ft_notebook.cluster._rendezvous import RendezvousStore
from ft_notebook.train.protocol import Plan, generation_prefix

pytestmark = pytest.mark.unit


def _set(store: RendezvousStore, key: str, value: bytes) -> dict[str, object]:
    return asyncio.run(store.handle("set", [key], [value]))


def test_forget_deletes_the_keys_under_a_prefix_only() -> None:
    store = RendezvousStore()
    for gen in (1, 2):
        plan = Plan("r", gen, ("a",), ("127.0.0.1", 0), incarnation="i")
        store.set(f"{plan.prefix}/0", b"addr")
        store.set(f"{plan.prefix}without-b//0", b"addr")
    store.set("ft/other/i/g1//0", b"addr")
    assert store.forget(generation_prefix("r", "i", 1)) == 2  # the group and its survivor's
    assert sorted(store.data) == ["ft/other/i/g1//0", "ft/r/i/g2//0", "ft/r/i/g2/without-b//0"]
    assert store.forget(generation_prefix("r", "i")) == 2  # every generation of the run
    assert list(store.data) == ["ft/other/i/g1//0"]
    assert store.nbytes == len("ft/other/i/g1//0") + len(b"addr")


def test_writes_past_its_bounds_are_refused_and_deletes_give_the_room_back() -> None:
    store = RendezvousStore(max_bytes=1000, max_keys=3)
    assert _set(store, "a", b"x" * 500) == {"value": None}
    refused = _set(store, "b", b"x" * 500)
    assert "holds 501 bytes; 500 more" in str(refused["error"])
    assert "limit of 1000 bytes" in str(refused["error"])
    assert refused["timeout"] is False
    assert "b" not in store.data
    _set(store, "a", b"x" * 10)  # overwriting counts the new size only
    assert store.nbytes == 11
    _set(store, "b", b"1")
    _set(store, "c", b"1")
    full = _set(store, "d", b"1")
    assert "holds 3 keys, its limit" in str(full["error"])
    assert asyncio.run(store.handle("delete_key", ["c"])) == {"value": True}
    assert _set(store, "d", b"1") == {"value": None}
    assert store.nbytes == 11 + 2 + 2


def test_the_operations_follow_tcpstore() -> None:
    store = RendezvousStore()

    def do(action: str, keys: list[str], values: list[bytes] | None = None, **kw: object) -> object:
        return asyncio.run(store.handle(action, keys, values, **kw))["value"]  # type: ignore[arg-type]

    assert do("add", ["n"], amount=2) == 2
    assert do("add", ["n"], amount=3) == 5
    assert do("get", ["n"], timeout_s=1) == b"5"
    assert do("compare_set", ["c"], [b"x", b"y"]) == b"x"  # missing, expected not empty
    assert "c" not in store.data
    assert do("compare_set", ["c"], [b"", b"y"]) == b"y"  # missing, expected empty: set
    assert do("compare_set", ["c"], [b"z", b"w"]) == b"y"  # a mismatch returns the value
    assert do("compare_set", ["c"], [b"y", b"w"]) == b"w"
    do("append", ["c"], [b"!"])
    do("multi_set", ["p", "q"], [b"1", b"2"])
    assert do("multi_get", ["p", "q"], timeout_s=1) == [b"1", b"2"]
    assert do("check", ["p", "nope"]) is False
    assert do("num_keys", []) == 4
    assert do("delete_key", ["nope"]) is False


def test_a_set_answers_the_keys_already_in_its_folder() -> None:
    """What lets the last rank of a group form it with one call: its set answers the
    peers' keys (its folder's), not other groups' nor its own."""
    store = RendezvousStore()

    def peek(key: str, value: bytes) -> object:
        return asyncio.run(store.handle("set_and_peek", [key], [value]))["value"]

    assert peek("g1/rank_0", b"a0") == {}
    assert peek("g2/rank_0", b"other group") == {}
    assert peek("g1/rank_1", b"a1") == {"g1/rank_0": b"a0"}
    assert peek("g1/rank_2", b"a2") == {"g1/rank_0": b"a0", "g1/rank_1": b"a1"}
    store.delete("g1/rank_0")
    assert peek("g1/rank_1", b"a1") == {"g1/rank_2": b"a2"}
    assert store.forget("g1/") == 2
    assert "g1" not in store.folders
    assert set(store.folders) == {"g2"}


def test_a_wait_ends_when_its_key_comes_or_at_its_timeout() -> None:
    async def scenario() -> tuple[dict[str, object], dict[str, object], float]:
        store = RendezvousStore()
        waiting = asyncio.ensure_future(store.handle("get", ["k"], timeout_s=10))
        await asyncio.sleep(0)  # the waiter is parked on the store
        store.set("other", b"-")
        assert not waiting.done()
        store.set("k", b"v")
        got = await asyncio.wait_for(waiting, 1)
        start = time.monotonic()
        missed = await store.handle("wait", ["never"], timeout_s=0.2)
        return got, missed, time.monotonic() - start

    got, missed, took = asyncio.run(scenario())
    assert got == {"value": b"v"}
    assert missed["timeout"] is True
    assert "1 of 1 keys did not come within 0.2 s" in str(missed["error"])
    assert 0.15 < took < 2


def test_closing_wakes_every_waiter() -> None:
    async def scenario() -> dict[str, object]:
        store = RendezvousStore()
        waiting = asyncio.ensure_future(store.handle("wait", ["k"], timeout_s=60))
        await asyncio.sleep(0)
        store.close()
        return await asyncio.wait_for(waiting, 1)

    assert asyncio.run(scenario())["timeout"] is True
