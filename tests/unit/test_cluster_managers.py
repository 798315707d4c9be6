"""The README's own-cluster examples for the cluster managers this machine cannot run
(no SLURM, no Kubernetes, no GPU): their imports work beside our Dask, and what
ft_notebook needs from their workers (a nanny, so a killed worker comes back) is
what they start.
"""

from __future__ import annotations

import pytest


def test_slurm_workers_run_under_nannies() -> None:
    """dask-jobqueue (not run here: no SLURM). Its job script is what `sbatch` would
    run; building it starts only a local scheduler."""
    from dask_jobqueue import SLURMCluster

    cluster = SLURMCluster(
        cores=8, processes=1, memory="16GB", scheduler_options={"host": "127.0.0.1"}
    )
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    assert "distributed.cli.dask_worker" in script
    assert "--nanny" in script
    assert "--no-nanny" not in script
    assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")


def test_kubernetes_operator_cluster_imports() -> None:
    """dask-kubernetes (not run here: no Kubernetes): the README's import works."""
    from dask_kubernetes.operator import KubeCluster

    assert callable(KubeCluster)


def test_dask_cuda_imports_where_it_installs() -> None:
    """dask-cuda (not run here: no GPU). It is not in the test dependencies: its
    rapids-dask-dependency pins an older Dask (2026.7.1) than ours; where it is
    installed, the README's import must work."""
    dask_cuda = pytest.importorskip("dask_cuda", reason="dask-cuda pins another Dask")
    assert callable(dask_cuda.LocalCUDACluster)
