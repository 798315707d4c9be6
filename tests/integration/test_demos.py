"""The demo notebooks run as a user would run them, crash included, in real kernels.

Cells tagged ``crash`` are where the demo kills its kernel: the test SIGKILLs the
kernel there instead, starts a fresh one, and goes on with the next cells. Every
variable must come back equal by content hash.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from ft_notebook.testing import NAMESPACE_HASHES, KernelSession, parse_hashes

DEMOS = sorted((Path(__file__).parents[2] / "demos").glob("*.ipynb"))


@pytest.mark.parametrize("path", DEMOS, ids=[p.stem for p in DEMOS])
def test_demo_notebook_runs_and_survives_its_crash(path: Path, tmp_path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), (
        "demos are committed without outputs"
    )
    env = dict(os.environ, JPY_SESSION_NAME=str(tmp_path / path.name))
    kernel = KernelSession(tmp_path / "kernel.log", cwd=tmp_path, env=env).start()
    crashed = False
    before: dict[str, str] = {}
    try:
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            tags = cell.metadata.get("tags", [])
            if "crash" in tags:
                before = parse_hashes(kernel.execute(NAMESPACE_HASHES, silent=True).check().stdout)
                kernel.kill()
                kernel.start()
                crashed = True
                continue
            result = kernel.execute(cell.source, timeout=300)
            if "raises-exception" in tags:
                assert result.status == "error", cell.source
            else:
                result.check()
        if crashed:
            after = parse_hashes(kernel.execute(NAMESPACE_HASHES, silent=True).check().stdout)
            changed = {k for k in before if before[k] != after.get(k)}
            # the cells after the crash may train on: only what they assign may differ
            assert changed <= {"model", "opt", "loss"}, changed
            assert set(before) <= set(after)
    finally:
        kernel.shutdown()


@pytest.mark.slow
def test_the_main_job_trains_through_a_killed_worker(tmp_path: Path) -> None:
    """``make demo``: on a private cluster of its own (a fresh data folder, so a fresh
    registry), a worker is killed mid-run and the report says what happened."""
    import subprocess
    import sys

    env = dict(os.environ, DASK_FT_NOTEBOOK__DATA_DIR=str(tmp_path / "data"))
    script = Path(__file__).parents[2] / "demos" / "train_with_failure.py"
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=400
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = out.stdout
    import re

    found = re.search(r"0 committed steps lost, workers (\d+) -> (\d+)", report)
    assert found is not None, report
    assert int(found[2]) == int(found[1]) - 1
    assert "exactly 3 times in 3 epochs: yes" in report, report
    # the killed worker trained in the run again, or the report says why it did not
    rejoined = re.search(r"worker \S+ came back \(its nanny restarted it\) and trained", report)
    assert rejoined or "did not rejoin the run" in report, report
    assert "stopped the cluster this demo started" in report, report
