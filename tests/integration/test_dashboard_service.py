"""A service dashboard on 3 real worker processes, one of them killed under load: every
view (the events the panel folds, the coordinator's table, this caller's router, the
dashboard's widgets) says why in words, with the raw error kept as the detail."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import torch
from distributed import Client

import ft_notebook as ft
from ft_notebook.cluster.chaos import kill_worker
from ft_notebook.events import Health, history, service_topic
from ft_notebook.testing import poll_for, training_cluster
from ft_notebook.testing.serving import closed_loop, inputs, small_mlp

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.chaos]

#: An exception's repr where words belong ("CommClosedError: in <TLS ...").
RAW = re.compile(r"\b\w+(Error|Exception)\b|<\w+ \(closed\)")


@pytest.fixture(scope="module")
def trio() -> Iterator[Client]:
    with training_cluster(3, worker_start="forkserver") as client:
        yield client


def test_a_killed_replica_is_explained_in_words_in_every_view(trio: Client) -> None:
    poll_for(
        lambda: len(trio.scheduler_info(n_workers=-1)["workers"]) == 3,
        timeout=90,
        what="3 workers",
    )
    svc = ft.serve(small_mlp, name="worded", cluster=trio, example=torch.zeros(1, 32))
    board = svc.dashboard(period=60)  # widgets, outside a kernel: built, not shown
    try:
        victim = next(r["worker"] for r in svc.table()["replicas"] if r["index"] == 1)
        xs = inputs(240)
        result = closed_loop(svc.call, xs, callers=6, after={60: lambda: kill_worker(trio, victim)})
        assert not result.errors, [repr(o.error) for o in result.errors[:3]]
        poll_for(lambda: svc.health is Health.HEALTHY, timeout=60, what="HEALTHY again")
        events = history(service_topic("worded"), via=trio)
        lost = next(e for e in events if e.kind == "replica-lost")
        assert lost.data["cause"] == (
            f"replica 1's worker {victim} was lost (its process is gone or its connection closed)"
        )
        assert lost.data["detail"] == f"worker {victim} lost: process gone or connection closed"
        degraded = next(
            e
            for e in events[events.index(lost) :]
            if e.kind == "health-changed" and e.data["health"] == "DEGRADED"
        )
        assert degraded.data["reason"] == f"2 of 3 replicas ready: {lost.data['cause']}"
        assert degraded.data["detail"] == lost.data["detail"]
        # this caller's router saw it through the pushed event, a failed call or a ping:
        # whichever, its tier changes say it in words
        changes = svc.router.status()["transitions"]
        assert any(t["tier"] == "DEGRADED" for t in changes), changes
        for change in changes:
            assert not RAW.search(change["reason"]), change
        board.poll()
        shown = board.view.tiles.value
        for i in range(3):
            assert f'class="ft-chip">replica {i}: ready</b>' in shown
        assert shown.count(">breaker closed</span>") == 3
        assert [(h, why) for _, h, why in board.state.view.transitions if h is Health.DEGRADED]
        assert not RAW.search(repr(svc)), repr(svc)
    finally:
        board.close()
        svc.close()
