"""The dashboard in a real JupyterLab, in a real Chromium: a notebook trains, a worker
is killed, and the page shows the worker's tile go LOST and back and the badge go
DEGRADED and back to HEALTHY; the loss chart has labelled axes, a log loss axis and a
legend of its marks, and the progress line is not cut off. Screenshots are kept
(``FT_SCREENSHOTS``, by default ``.screenshots/`` at the repository root); look at them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _lab import (
    KERNEL_IDLE,
    SHOTS,
    Lab,
    needs_chromium,
    open_page,
    run_lab,
    screenshot,
    write_notebook,
)
from distributed import Client

from ft_notebook.testing import training_cluster

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CELLS = [
    """import os
from distributed import Client
import ft_notebook as ft
from ft_notebook.cluster.chaos import kill_worker
from ft_notebook.testing import poll_for
from ft_notebook.testing.training import counting_problem
client = Client(os.environ["FT_TEST_SCHEDULER"], set_as_default=False)
run = ft.fit(epochs=40, cluster=client, name=os.environ["FT_TEST_RUN"],
             store=os.environ["FT_TEST_STORE"], wait=False, checkpoint_every=8,
             **counting_problem(size=256, batch=32, delay_s=0.05))""",
    "run.dashboard()",
    """info = poll_for(lambda: (i := run.info())["step"] >= 12 and i, timeout=120)
kill_worker(client, info["members"][-1])
run.wait(timeout=300)""",
]


#: The page's bokeh figures (BokehJS's index of root views): the loss line's points,
#: axis labels (x, then y), the y scale, and the labels of the visible legend items.
CHARTS = """() => {
    const label = (l) => typeof l === "string" ? l : (l && (l.value ?? l.field));
    const figures = Object.values(window.Bokeh ? window.Bokeh.index : {})
        .filter((view) => view.el && view.el.isConnected)  // a figure swapped out is not
        .map((view) => view.model).filter((m) => m && m.y_scale !== undefined);
    return figures.map((f) => ({
        points: (d => (d.get ? d.get("loss") : d.loss).length)(f.renderers[0].data_source.data),
        axes: [...f.below, ...f.left].filter((a) => "axis_label" in a).map((a) => a.axis_label),
        y_scale: f.y_scale.constructor.__name__,
        legend: [...f.right, ...f.below, ...f.center].filter((a) => a.items !== undefined)
            .flatMap((l) => l.items.filter((i) => i.visible).map((i) => label(i.label))),
    }));
}"""
#: Where the progress line is drawn, against the box of the widget that holds it.
PROGRESS = """() => {
    const span = document.querySelector(".ft-progress");
    if (!span) return null;
    const box = span.closest(".jupyter-widget-html, .widget-html") || span.parentElement;
    const s = span.getBoundingClientRect(), b = box.getBoundingClientRect();
    return {
        text: span.innerText,
        inside: s.left >= b.left - 1 && s.right <= b.right + 1 && s.bottom <= b.bottom + 1,
        span: [s.left, s.right, s.bottom], box: [b.left, b.right, b.bottom],
    };
}"""


@pytest.fixture(scope="module")
def trio() -> Iterator[Client]:
    # spawned workers: a killed one is back after ~2 s, so its LOST tile and the DEGRADED
    # badge last longer than one render of the dashboard (a forked one is back in ~0.1 s,
    # between two renders, and the page may never show them: the chart's marks do)
    with training_cluster(3, worker_start="spawn") as client:
        yield client


@pytest.fixture
def lab(trio: Client, tmp_path: Path, ft_data_dir: Path, unique_name: str) -> Iterator[Lab]:
    """A real ``jupyter lab`` serving a folder with the notebook, whose kernels reach
    the trio."""
    root = tmp_path / "notebooks"
    root.mkdir()
    write_notebook(root / "dashboard.ipynb", CELLS)
    env = {
        "FT_TEST_SCHEDULER": trio.scheduler.address,
        "FT_TEST_RUN": unique_name,
        "FT_TEST_STORE": str(tmp_path / "ckpt"),  # outside the notebooks' folder
        "DASK_FT_NOTEBOOK__DATA_DIR": str(ft_data_dir),
    }
    with run_lab(root, tmp_path, env) as server:
        yield server


@needs_chromium
def test_the_page_shows_the_tile_and_the_badge_change(lab: Lab, unique_name: str) -> None:
    seen: dict[str, list[str]] = {"tile": [], "badge": [], "state": []}
    with open_page(lab, "lab/tree/dashboard.ipynb?reset", "dashboard") as page:
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        page.wait_for_function(KERNEL_IDLE, timeout=90_000)
        # not awaited: the command's promise ends when the whole notebook has run
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        page.wait_for_selector(".ft-badge", timeout=120_000)
        probe = """() => {
            const tile = document.querySelector('.ft-tile[data-worker="2"]');
            const badge = document.querySelector('.ft-badge');
            const health = badge.dataset.health;
            return [tile ? tile.dataset.state : null, health, badge.dataset.state];
        }"""
        shot = {"healthy": False, "degraded": False}
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            tile, health, state = page.evaluate(probe)
            for key, value in (("tile", tile), ("badge", health), ("state", state)):
                if value and (not seen[key] or seen[key][-1] != value):
                    seen[key].append(value)
            if tile == "TRAINING" and health == "HEALTHY" and not shot["healthy"]:
                screenshot(page, "dashboard-1-healthy")
                shot["healthy"] = True
            if health in ("DEGRADED", "RECOVERING") and not shot["degraded"]:
                screenshot(page, "dashboard-2-degraded")
                shot["degraded"] = True
            if state == "COMPLETED":
                break
            time.sleep(0.05)
        page.wait_for_timeout(1500)  # the chart's last points
        screenshot(page, "dashboard-3-completed")
        charts = page.evaluate(CHARTS)
        progress = page.evaluate(PROGRESS)
        # the Resilience panel lists the run, finished, with its recovery and RTO
        page.evaluate("() => window.jupyterapp.commands.execute('ft-notebook:open-panel')")
        run_row = f'.jp-ft-run[data-run="{unique_name}"][data-state="COMPLETED"]'
        # a finished run is one line; a click on it opens the rest, recoveries included
        page.click(f"{run_row} > summary .jp-ft-run-line-progress", timeout=30_000)
        rto = page.inner_text(f"{run_row} .jp-ft-recovery .jp-ft-recovery-rto", timeout=30_000)
        screenshot(page, "dashboard-4-panel")
    (SHOTS / "dashboard-sequence.json").write_text(json.dumps(seen, indent=1))
    assert seen["state"], seen
    assert seen["state"][-1] == "COMPLETED", seen
    # the loss chart as BokehJS holds it in the page: labelled axes, a legend of the loss
    # line and of the kinds of mark drawn (a kill and its recovery); the counting
    # problem's loss is negative, which a log axis cannot show: a linear one, every point
    (chart,) = charts
    assert chart["axes"] == ["step", "loss"], chart
    assert chart["y_scale"] == "LinearScale", chart
    assert chart["points"] >= 12, chart
    assert chart["legend"][:1] == ["loss"], chart
    assert {"worker lost", "recovered"} <= set(chart["legend"]), chart
    # the progress line is all inside its widget, wrapped if need be, not cut off
    assert progress is not None
    assert progress["text"].startswith("epoch "), progress
    assert progress["inside"], progress
    # a forked replacement is back within ~0.1 s, inside one of the dashboard's renders
    # (4 a second): the tile may go from TRAINING to TRAINING; the chart marks the loss
    if "LOST" in seen["tile"]:
        assert "TRAINING" in seen["tile"][seen["tile"].index("LOST") :], seen
    else:
        assert "worker lost" in charts[0]["legend"], (seen, charts)
    assert "DEGRADED" in seen["badge"], seen
    assert "HEALTHY" in seen["badge"][seen["badge"].index("DEGRADED") :], seen
    assert rto.startswith("RTO "), rto
