"""The cluster dashboard: one tile per worker, following kills and restarts live."""

from __future__ import annotations

import pytest

from ft_notebook.cluster.chaos import kill_worker
from ft_notebook.testing import poll_for, training_cluster
from ft_notebook.widgets import dashboard

pytestmark = pytest.mark.integration


def test_a_killed_worker_shows_lost_then_running_again() -> None:
    with training_cluster(2) as client:
        live = dashboard(client=client)
        try:
            assert set(live.state.tiles) == {"0", "1"}
            assert all(t.state == "RUNNING" for t in live.state.tiles.values())
            seen: list[str] = []

            def tile_of_1() -> bool:
                html = live.view.tile_views["1"].value
                state = (
                    "LOST"
                    if 'data-state="LOST"' in html
                    else "RUNNING"
                    if 'data-state="RUNNING"' in html
                    else "?"
                )
                if not seen or seen[-1] != state:
                    seen.append(state)
                return seen[-2:] == ["LOST", "RUNNING"]

            kill_worker(client, "1")
            poll_for(tile_of_1, timeout=60, what="tile 1 lost, then running again")
            assert "cluster: HEALTHY" in repr(live)
        finally:
            live.close()
