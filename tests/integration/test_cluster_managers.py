"""The README's examples for the cluster managers this machine cannot run (no SLURM, no
Kubernetes, no GPU), checked as far as it can: each import marked "not run here" works
beside our Dask, and the SLURM example's constructor, as written, builds a job script
that starts its worker under a nanny (what ft_notebook needs to get a killed worker
back). Its scheduler is local; nothing is submitted.

The managers live in their own venv (``make test`` makes ``.venv/managers``, which
sees this venv's packages); each check runs there with ``DASK_CONFIG`` pointed at a
temporary folder, because dask-jobqueue and dask-kubernetes write their YAML into the
Dask config folder when imported.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MANAGERS = Path(sys.prefix) / "managers" / "bin" / "python"


def readme_examples() -> dict[str, tuple[str, str]]:
    """Each "not run here" import of the README's own-cluster block, with the cluster
    expression that the block passes to ``Client(...)`` after it."""
    text = (ROOT / "README.md").read_text()
    block = text.split("### Your own Dask cluster", 1)[1].split("```python", 1)[1]
    block = block.split("```", 1)[0]
    found = re.findall(
        r"^(from (\S+) import (\w+))\s+# .*\(not run here\)\n[\s\S]*?Client\((\3\([^()]*\))\)",
        block,
        flags=re.M,
    )
    return {cls: (imp, expr) for imp, _module, cls, expr in found}


def in_managers_venv(code: str, tmp_path: Path) -> str:
    if not MANAGERS.exists():
        pytest.fail(f"{MANAGERS} is missing: `make test` makes it")
    config = tmp_path / "dask-config"
    config.mkdir()
    # the SLURM example's scheduler listens on this machine only, not on every interface
    (config / "local.yaml").write_text(
        "jobqueue:\n  slurm:\n    scheduler-options: {host: 127.0.0.1}\n"
    )
    done = subprocess.run(
        [str(MANAGERS), "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DASK_CONFIG": str(config)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_readme_names_the_three_managers() -> None:
    assert set(readme_examples()) == {"SLURMCluster", "KubeCluster", "LocalCUDACluster"}


@pytest.mark.parametrize("manager", ["KubeCluster", "LocalCUDACluster"])
def test_the_readme_import_works_beside_our_dask(manager: str, tmp_path: Path) -> None:
    imp, _ = readme_examples()[manager]
    out = in_managers_venv(
        f"{imp}\nimport dask, distributed\n"
        f"print(callable({manager}), dask.__version__, distributed.__file__)",
        tmp_path,
    )
    import dask
    import distributed

    assert out.split() == ["True", dask.__version__, distributed.__file__]


def test_the_slurm_example_starts_workers_under_nannies(tmp_path: Path) -> None:
    imp, expr = readme_examples()["SLURMCluster"]
    out = in_managers_venv(
        f"{imp}\ncluster = {expr}\n"
        "try:\n    print(cluster.job_script())\nfinally:\n    cluster.close()\n",
        tmp_path,
    )
    assert "#SBATCH" in out
    assert "distributed.cli.dask_worker" in out
    assert "--nanny" in out
    assert "--no-nanny" not in out
    assert "tcp://127.0.0.1:" in out  # the worker connects to the local scheduler
