"""Demo 04 (Byzantine workers, checkpoint planning) at a person's pace, and with a
kernel restart while a blocking ``ft.fit`` waits (see ``_demo_player``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _demo_player import paced, restarted

pytestmark = pytest.mark.integration


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_04_at_a_person_s_pace(tmp_path: Path) -> None:
    player = paced("04_byzantine_and_planning", tmp_path)
    print(player.history())


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_04_survives_a_kernel_restart_during_a_blocking_fit(tmp_path: Path) -> None:
    """Restarted while ``ft.fit`` waited for the median run (a cell that blocks, as a
    person restarts a kernel that seems stuck): the run trained on in the cluster, and
    the same cell run again waits for it instead of refusing its name."""
    player, at = restarted("04_byzantine_and_planning", tmp_path)
    assert "attached to demo-median-" in player.outputs(at), player.outputs(at)
