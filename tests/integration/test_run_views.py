"""Issue 33: what the panel and the status bar read of a run (the REST payload, folded
from the run's journal) is what the run is, from its start to its cluster's end."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from ft_notebook.cluster import clusters, down
from ft_notebook.events import Health, RunState
from ft_notebook.server._manager import ResilienceManager
from ft_notebook.server._models import RunModel
from ft_notebook.testing import poll_for, private_cluster
from ft_notebook.testing._kernel import KernelSession
from ft_notebook.testing.training import counting_problem
from ft_notebook.train import fit

pytestmark = pytest.mark.integration


def _panel(run: str) -> RunModel:
    [model] = [r for r in ResilienceManager().runs() if r.name == run]
    return model


def _a_long_run_on(client: object, name: str, store: Path) -> str:
    """Start a run that trains for minutes; return its cluster's registry name."""
    [cluster] = [c.name for c in clusters() if c.address == client.scheduler.address]  # type: ignore[attr-defined]
    run = fit(
        epochs=1000,
        cluster=client,
        name=name,
        store=str(store),
        checkpoint_every=2,
        wait=False,
        **counting_problem(delay_s=0.05),
    )
    poll_for(lambda: (run.info()["checkpoint"] or 0) >= 2, timeout=90, what="a checkpoint")
    return cluster


def test_a_run_is_healthy_from_its_start_and_ends_with_its_cluster(
    tmp_path: Path, unique_name: str
) -> None:
    """A healthy running run showed a grey UNKNOWN badge (health was told only when it
    changed); after ``ft.down`` it stayed RUNNING, and the status bar counted its
    checkpoint's age on. Now it is HEALTHY while it trains, and CANCELLED with its
    cluster, saying why."""
    with private_cluster("t-views", workers=1) as client:
        cluster = _a_long_run_on(client, unique_name, tmp_path)
        running = _panel(unique_name)
        assert (running.state, running.health) == (RunState.RUNNING, Health.HEALTHY)
        assert (running.cluster, running.cluster_gone) == (cluster, False)
        assert running.step is not None
        assert running.checkpoint_step is not None
        assert running.step >= running.checkpoint_step
        assert down(cluster)
    ended = _panel(unique_name)
    assert (ended.state, ended.cluster_gone) == (RunState.CANCELLED, False)


def test_a_run_whose_cluster_was_killed_is_shown_as_gone(tmp_path: Path, unique_name: str) -> None:
    """A cluster killed outright (SIGKILL, the machine's OOM killer) cannot say that
    its runs ended: the panel tells from the registry that their cluster is gone."""
    with private_cluster("t-killed", workers=1) as client:
        cluster = _a_long_run_on(client, unique_name, tmp_path)
        [info] = [c for c in clusters() if c.name == cluster]
        os.kill(info.pid, signal.SIGKILL)  # its workers exit by themselves
        poll_for(lambda: cluster not in {c.name for c in clusters()}, timeout=30)
        gone = _panel(unique_name)
        assert gone.state is RunState.RUNNING  # its last word, marked as no longer true
        assert gone.cluster_gone


def test_a_run_on_a_cluster_inside_a_killed_kernel_is_shown_as_gone(
    tmp_path: Path, unique_name: str
) -> None:
    """A Dask cluster of the notebook's own (``LocalCluster`` in the kernel, in no
    registry) dies with its kernel: killed by the OOM killer, the run's last word in its
    journal was RUNNING, and the panel kept showing it so. The run told which process
    its scheduler lives in; the panel sees that process gone."""
    session = KernelSession(log_path=tmp_path / "kernel.log", cwd=tmp_path).start()
    try:
        session.execute(
            "from distributed import Client, LocalCluster\n"
            "from ft_notebook.testing.training import counting_problem\n"
            "from ft_notebook.train import fit\n"
            "client = Client(LocalCluster(n_workers=1, threads_per_worker=1, processes=True))\n"
            f"run = fit(epochs=1000, cluster=client, name={unique_name!r}, "
            f"store={str(tmp_path / 'store')!r}, checkpoint_every=2, wait=False, "
            "**counting_problem(delay_s=0.05))\n",
            timeout=120,
        ).check()
        poll_for(
            lambda: _panel(unique_name).checkpoint_step is not None, timeout=90, what="a checkpoint"
        )
        alive = _panel(unique_name)
        assert (alive.state, alive.cluster, alive.cluster_gone) == (RunState.RUNNING, "", False)
        session.kill()
        gone = _panel(unique_name)
        assert gone.state is RunState.RUNNING  # its last word, marked as no longer true
        assert gone.cluster_gone
    finally:
        session.shutdown()
