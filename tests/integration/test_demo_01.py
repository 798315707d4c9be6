"""Demo 01 at a person's pace: 15 s before the cell that fails halfway and before
the cell that kills the kernel (see ``_demo_player``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _demo_player import paced

pytestmark = pytest.mark.integration


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_01_at_a_person_s_pace(tmp_path: Path) -> None:
    player = paced("01_crash_and_transaction", tmp_path)
    [restored] = [i for i in player.code_cells if "%ft restore" in player.nb.cells[i].source]
    assert "restored" in player.outputs(restored).lower(), player.outputs(restored)
