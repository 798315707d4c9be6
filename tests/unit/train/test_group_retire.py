"""A retired generation's groups, and their gloo listeners, go soon after nothing runs
on them (two seconds, which keeps their destruction off a recovery's first steps):
after the retire when no collective was left running, else after it has ended (its
peers gone), never only after the groups' whole timeout (issue 36: every ft.fit left
its listeners open, each accepting any local connection)."""

from __future__ import annotations

import datetime
import threading
from typing import Any

import psutil
import pytest
import torch
import torch.distributed as dist

from ft_notebook.testing import poll_for
from ft_notebook.train.rank._groups import GRAVEYARD, Generation

pytestmark = pytest.mark.unit

MEMBERS = ("a", "b")


def _listeners() -> int:
    return sum(
        1 for c in psutil.Process().net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
    )


def _generation_pair() -> list[Generation]:
    """Both ranks of a 2-rank gloo generation, in this process."""
    store = dist.HashStore()  # type: ignore[attr-defined]
    groups: dict[int, Any] = {}

    def rank(r: int) -> None:
        prefixed = dist.PrefixStore("g/", store)  # type: ignore[attr-defined]
        groups[r] = dist.ProcessGroupGloo(prefixed, r, 2, datetime.timedelta(seconds=60))  # type: ignore[attr-defined]

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return [Generation("g/", 1, MEMBERS, MEMBERS[r], groups[r], "gloo", [store]) for r in (0, 1)]


def test_groups_go_at_once_or_when_the_collective_left_on_them_ends() -> None:
    before = _listeners()
    first, second = _generation_pair()
    assert _listeners() == before + 2
    # rank a was interrupted inside an all-reduce that b never joins: it still runs
    pending = first.group.allreduce([torch.ones(1)])
    first.retire(timeout_s=60, pending=[pending])
    assert not pending.is_completed()
    assert _listeners() == before + 2  # a's group must outlive its running collective
    second.retire(timeout_s=60, pending=[])  # nothing left running: b's goes at once
    # b's group gone fails a's collective, and then a's group goes too, long before 60 s
    poll_for(pending.is_completed, timeout=10, what="a's collective ended by b's going")
    del pending  # a collective's work holds its group's connections (the rank drops it)
    poll_for(lambda: _listeners() == before, timeout=10, what="both groups' listeners closed")
    assert not GRAVEYARD


def test_a_retired_group_is_not_destroyed_during_the_recovery_that_retired_it() -> None:
    """Destroying a gloo group holds the GIL while it joins its threads: dropped at
    once, the old generation's groups held up the survivors' first steps (SIGKILL ->
    first step 49-65 ms instead of 28-39 ms). They go two seconds later."""
    import time

    from ft_notebook.train.rank import _groups

    before = _listeners()
    first, second = _generation_pair()
    retired_at = time.monotonic()
    first.retire(timeout_s=60, pending=[])
    second.retire(timeout_s=60, pending=[])
    while time.monotonic() - retired_at < _groups._DROP_AFTER_S / 2:
        assert _listeners() == before + 2, "a retired group was destroyed at once"
    poll_for(lambda: _listeners() == before, timeout=10, what="both groups' listeners closed")
    assert time.monotonic() - retired_at >= _groups._DROP_AFTER_S * 0.9
