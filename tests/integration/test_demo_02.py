"""Demo 02 (elastic training) at a person's pace (see ``_demo_player``); the play with a
kernel restart while it trains is in ``test_demo_02_restart.py``, so the two run side
by side."""

from __future__ import annotations

from pathlib import Path

import pytest
from _demo_player import paced

pytestmark = pytest.mark.integration


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_demo_02_at_a_person_s_pace(tmp_path: Path) -> None:
    player = paced("02_elastic_training", tmp_path)
    [kill, hang, down] = player.tagged("ft-fault")
    assert "killing" in player.outputs(kill), player.outputs(kill)
    assert "hanging" in player.outputs(hang), player.outputs(hang)
    print(player.outputs(down))  # still training, or ended: the demo handles both
    print(player.history())
