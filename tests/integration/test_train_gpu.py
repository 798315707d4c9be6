"""ft.fit on GPUs with NCCL: run on a machine with NVIDIA GPUs (deselected elsewhere).

``gpu``: one worker on one GPU, NCCL at world size 1, on a plain SpecCluster and on
the user's private (TLS) cluster with its GPU-pinned workers. ``gpu2``: one worker per
GPU on two GPUs, one is SIGKILLed mid-run, the other goes on and the restarted one
rejoins.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from distributed import Client

from ft_notebook.cluster import install_plugins
from ft_notebook.cluster.chaos import kill_worker
from ft_notebook.testing import poll_for
from ft_notebook.testing.training import counting_problem, regression_problem
from ft_notebook.train import fit


def _gpu_cluster(n: int) -> Iterator[Client]:
    if torch.cuda.device_count() < n:
        pytest.skip(f"needs {n} CUDA GPU(s), this machine has {torch.cuda.device_count()}")
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {
        f"gpu{i}": {
            "cls": Nanny,
            "options": {"nthreads": 1, "env": {"CUDA_VISIBLE_DEVICES": str(i)}, "name": f"gpu{i}"},
        }
        for i in range(n)
    }
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": ":0"}}
    with SpecCluster(workers=workers, scheduler=scheduler) as sc, Client(sc) as client:
        install_plugins(client)
        yield client


@pytest.fixture
def one_gpu() -> Iterator[Client]:
    yield from _gpu_cluster(1)


@pytest.fixture
def two_gpus() -> Iterator[Client]:
    yield from _gpu_cluster(2)


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["auto", "cuda"])  # "cuda" without an index once failed
def test_nccl_at_world_size_one(
    one_gpu: Client, tmp_path: Path, unique_name: str, device: str
) -> None:
    run = fit(
        epochs=3,
        cluster=one_gpu,
        name=unique_name,
        store=str(tmp_path),
        device=device,
        amp=True,
        **regression_problem(size=512, batch=64),
    )
    info = run.info()
    assert info["state"] == "COMPLETED"
    logs = "\n".join(run.logs().values())
    assert "ready on cuda" in logs, logs
    first, last = info["history"][0]["loss"], info["loss"]
    assert last < first


_FIT_THEN_CLOSE = textwrap.dedent(
    """
    import sys
    from distributed import Client, LocalCluster
    from ft_notebook.cluster import install_plugins
    from ft_notebook.testing.training import regression_problem
    from ft_notebook.train import fit

    if __name__ == "__main__":
        with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as lc:
            with Client(lc) as client:
                install_plugins(client)
                run = fit(epochs=1, cluster=client, store=sys.argv[1], name="exit-check",
                          **regression_problem(size=256, batch=64))
                assert run.info()["state"] == "COMPLETED"
        print("closed")
    """
)


@pytest.mark.gpu
def test_gpu_workers_exit_cleanly_right_after_a_run(tmp_path: Path) -> None:
    """A worker closed just after an NCCL run once died in std::terminate: its
    communicator was destroyed after the CUDA driver had shut down."""
    if torch.cuda.device_count() < 1:
        pytest.skip("needs a CUDA GPU")
    script = tmp_path / "fit_then_close.py"
    script.write_text(_FIT_THEN_CLOSE)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "closed" in done.stdout, done.stderr[-3000:]
    for sign in ("terminate called", "driver shutting down"):
        assert sign not in done.stderr, done.stderr[-3000:]


@pytest.mark.gpu
def test_private_cluster_trains_on_its_gpus(
    isolated_data_dir: Path, tmp_path: Path, unique_name: str
) -> None:
    """The cluster a user gets from ft.cluster() pins one worker per GPU; ft.fit with
    device "auto" puts each rank on its worker's GPU, and NCCL connects them."""
    if torch.cuda.device_count() < 1:
        pytest.skip("needs a CUDA GPU")
    from ft_notebook.cluster import cluster, down

    name = f"t-gpu-{unique_name}"
    client = cluster(name=name, gpus="all", set_as_default=False)
    try:
        run = fit(
            epochs=2,
            cluster=client,
            name=unique_name,
            store=str(tmp_path),
            checkpoint_every=4,
            **counting_problem(size=128, batch=16),
        )
        info = run.info()
        assert info["state"] == "COMPLETED", info
        logs = "\n".join(run.logs().values())
        assert logs.count("ready on cuda") == info["world_size"] >= 1, logs
        assert bool((run.model().counts.cpu() == 2).all())
    finally:
        client.close()
        down(name)


@pytest.mark.gpu2
def test_recovery_across_gpus(two_gpus: Client, tmp_path: Path, unique_name: str) -> None:
    run = fit(
        epochs=4,
        cluster=two_gpus,
        name=unique_name,
        store=str(tmp_path),
        wait=False,
        **counting_problem(size=256, batch=32, delay_s=0.05),
    )
    info = poll_for(lambda: (i := run.info())["step"] >= 6 and i, timeout=120)
    kill_worker(two_gpus, str(info["members"][1]))
    run.wait(timeout=300)
    info = run.info()
    assert info["state"] == "COMPLETED"
    assert info["recoveries"][0]["steps_lost"] == 0
    assert bool((run.model().counts.cpu() == 4).all())
