"""The rendezvous store forgets the keys of groups that will never meet again."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import torch.distributed as dist

from ft_notebook.cluster._rendezvous import open_store
from ft_notebook.train.protocol import Plan, generation_prefix

pytestmark = pytest.mark.unit


def test_forget_deletes_the_keys_under_a_prefix_only() -> None:
    rendezvous = open_store("127.0.0.1")
    try:
        _check_forget(rendezvous)
    finally:
        rendezvous.sock.close()


def _check_forget(rendezvous: Any) -> None:
    client = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", rendezvous.port, None, False, timeout=datetime.timedelta(seconds=5)
    )
    for gen in (1, 2):
        plan = Plan("r", gen, ("a",), ("127.0.0.1", rendezvous.port), incarnation="i")
        dist.PrefixStore(plan.prefix, client).set("0", "addr")  # type: ignore[attr-defined]
        dist.PrefixStore(f"{plan.prefix}without-b/", client).set("0", "addr")  # type: ignore[attr-defined]
    dist.PrefixStore("ft/other/i/g1/", client).set("0", "addr")  # type: ignore[attr-defined]
    assert rendezvous.forget(generation_prefix("r", "i", 1)) == 2  # the group and its survivor's
    assert sorted(rendezvous.store.list_keys()) == [
        "ft/other/i/g1//0",
        "ft/r/i/g2//0",
        "ft/r/i/g2/without-b//0",
    ]
    assert rendezvous.forget(generation_prefix("r", "i")) == 2  # every generation of the run
    assert rendezvous.store.list_keys() == ["ft/other/i/g1//0"]
