"""The ranks' rendezvous store: gloo groups form through it, over a worker's own
connection to a real scheduler's ``ft_rendezvous`` handler, from ranks' threads."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
from distributed import Client, LocalCluster

from ft_notebook.cluster import install_plugins
from ft_notebook.cluster._control import control_plane
from ft_notebook.testing import poll_for
from ft_notebook.train.rank._store import ClusterStore

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def worker() -> Iterator[Any]:
    """An in-process scheduler and worker with the control plane installed."""
    with (
        LocalCluster(
            n_workers=1,
            processes=False,
            protocol="tcp",
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        install_plugins(client)
        yield next(iter(cluster.workers.values()))


class CountedStore(ClusterStore):
    def __init__(self, worker: Any, timeout_s: float) -> None:
        super().__init__(worker, timeout_s)
        self.calls: list[str] = []

    def _call(self, op: str, keys: list[str], timeout_s: float = 0.0, **kw: Any) -> Any:
        self.calls.append(op)
        return super()._call(op, keys, timeout_s, **kw)


def test_three_ranks_form_a_gloo_group_through_the_scheduler(worker: Any) -> None:
    groups: dict[int, Any] = {}
    stores = [CountedStore(worker, timeout_s=20) for _ in range(3)]  # one per rank, as ranks do

    def rank(r: int) -> None:
        prefixed = dist.PrefixStore("ft/t/i/g1/", stores[r])  # type: ignore[attr-defined]
        groups[r] = dist.ProcessGroupGloo(prefixed, r, 3, datetime.timedelta(seconds=20))

    store = control_plane(_scheduler(worker)).rendezvous
    assert store is not None
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(3)]
    for r, t in enumerate(threads):  # one after another: each finds its elders' keys
        t.start()
        poll_for(
            lambda r=r: sum(k.startswith("ft/t/i/g1/") for k in store.data) > r,
            timeout=20,
            what=f"rank {r}'s key",
        )
    for t in threads:
        t.join(60)
    assert sorted(groups) == [0, 1, 2]
    tensors = [torch.full((2,), float(r)) for r in range(3)]
    works = [groups[r].allreduce([tensors[r]]) for r in range(3)]
    for w in works:
        w.wait()
    assert all(t.tolist() == [3.0, 3.0] for t in tensors)
    # one round trip for its own address, which answers the peers' already there, and
    # one per peer still to come: the last rank forms its group with one call (with a
    # plain set, each rank made three)
    assert [s.calls for s in stores] == [
        ["set_and_peek", "wait", "wait"],
        ["set_and_peek", "wait"],
        ["set_and_peek"],
    ]
    keys = [k for k in store.data if k.startswith("ft/t/i/g1/")]
    assert keys  # the group's addresses went through the scheduler
    assert store.forget("ft/t/i/g1/") == len(keys)


def test_a_key_that_never_comes_fails_the_get_within_the_store_timeout(worker: Any) -> None:
    store = ClusterStore(worker, timeout_s=0.3)
    store.set("here", b"1")
    assert store.get("here") == b"1"
    assert store.check(["here"])
    assert not store.check(["here", "absent"])
    with pytest.raises(dist.DistStoreError, match=r"did not come within 0\.3 s"):  # type: ignore[attr-defined]
        store.get("absent")
    assert store.add("n", 4) == 4
    assert store.delete_key("here")
    assert not store.delete_key("here")


def _scheduler(worker: Any) -> Any:
    from distributed import Scheduler

    [scheduler] = [s for s in Scheduler._instances if s.address == worker.scheduler.address]
    return scheduler
