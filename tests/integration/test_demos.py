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
