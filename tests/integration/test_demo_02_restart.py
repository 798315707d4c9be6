"""Demo 02 (elastic training) with a kernel restart while it trains (see
``_demo_player``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _demo_player import restarted

pytestmark = pytest.mark.integration


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_02_survives_a_kernel_restart_while_it_trains(tmp_path: Path) -> None:
    """Restarted right after the run started: the run goes on in the cluster, and the
    cell that started it attaches to it from the new kernel instead of starting
    another (a second run would fight the first for the workers); the faults after it
    act on the attached run."""
    player, at = restarted("02_elastic_training", tmp_path)
    assert "attached to demo-elastic-" in player.outputs(at), player.outputs(at)
