"""Demo 03 (resilient serving) at a person's pace, and with a kernel restart while
its callers send requests (see ``_demo_player``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _demo_player import paced, restarted

pytestmark = pytest.mark.integration


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_03_at_a_person_s_pace(tmp_path: Path) -> None:
    player = paced("03_resilient_serving", tmp_path)
    print(player.history())


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_03_survives_a_kernel_restart_while_it_serves(tmp_path: Path) -> None:
    """Restarted while its callers were sending requests: the service lives in the
    cluster, so the new kernel attaches to it (``ft.service``) instead of failing to
    create a second ``ranker``, and the kills after it are served through."""
    player, at = restarted("03_resilient_serving", tmp_path)
    [serve] = player.tagged("ft-starts")
    assert "attached to the running service" in player.outputs(serve), player.outputs(serve)
    assert at > serve
