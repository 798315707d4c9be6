"""A run's dashboard docked in the main area of a real JupyterLab, in a real Chromium:
opened from the Resilience panel's row of a run training on a real cluster, it plots
the loss on a log axis and samples/s by step, with axis labels, a legend and marks
where a killed worker was lost and the run recovered; the panel's row plots the same
history inline. The screenshots go to the screenshots folder (the README's
docs/lab-*.png are copies of them)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _lab import SHOTS, Lab, needs_chromium, open_page, run_lab, screenshot

from ft_notebook.cluster import cluster, down, status
from ft_notebook.cluster.chaos import kill_worker

pytestmark = [pytest.mark.browser, pytest.mark.slow, needs_chromium]

#: the README's docs/lab-*.png are copies of these (a test run leaves docs/ as it is)
DOCS = SHOTS


@pytest.fixture
def lab(tmp_path: Path, ft_data_dir: Path) -> Iterator[Lab]:
    root = tmp_path / "notebooks"
    root.mkdir()
    with run_lab(root, tmp_path, {"DASK_FT_NOTEBOOK__DATA_DIR": str(ft_data_dir)}) as server:
        yield server


@pytest.fixture
def private_pair(ft_data_dir: Path) -> Iterator[tuple[str, Any]]:
    name = f"t-dash-{uuid.uuid4().hex[:6]}"
    client = cluster(name=name, workers=2, set_as_default=False)
    try:
        yield name, client
    finally:
        client.close()
        down(name)


def _texts(page: Any, selector: str) -> list[str]:
    return list(page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)"))


def test_a_docked_run_dashboard_plots_loss_throughput_and_the_recovery(
    lab: Lab, private_pair: tuple[str, Any], tmp_path: Path
) -> None:
    from ft_notebook.testing.training import regression_problem
    from ft_notebook.train import fit

    _, client = private_pair
    run = f"t-docked-{uuid.uuid4().hex[:6]}"
    handle = fit(
        epochs=1000,
        cluster=client,
        name=run,
        store=str(tmp_path / "ckpt"),
        checkpoint_every=5,
        wait=False,
        **regression_problem(delay_s=0.01),
    )
    row = f'.jp-ft-run[data-run="{run}"]'
    tab = f".jp-ft-run-dashboard:has([data-run='{run}'])"
    try:
        with open_page(lab, "lab?reset", "lab-dashboards") as page:
            page.evaluate("() => window.jupyterapp.commands.execute('ft-notebook:open-panel')")
            page.wait_for_selector(f'{row}[data-state="RUNNING"]', timeout=60_000)
            # a few progress reports, then a worker killed: a loss and a recovery to mark
            page.wait_for_function(
                "(row) => Number(document.querySelector(row + ' .jp-ft-plot-line"
                '[data-series="loss"]\')?.dataset.points) >= 4',
                arg=row,
                timeout=60_000,
            )
            worker = sorted(w.name for w in status(client))[-1]
            kill_worker(client, worker)
            page.click(f"{row} .jp-ft-open-run-dashboard")
            page.wait_for_selector(
                # a vertical line has no width: Playwright never calls it visible
                f"{tab} .jp-ft-plot-mark-recovery",
                state="attached",
                timeout=90_000,
            )
            # a few more points after the recovery, for a line that goes on past it
            page.wait_for_function(
                "(tab) => { const l = document.querySelector(tab + ' .jp-ft-plot-line"
                '[data-series="loss"]\'); const m = document.querySelector(tab +'
                " ' .jp-ft-plot-mark-recovery'); return l && m && Number(l.dataset.points)"
                " >= 12 && l.getBoundingClientRect().right - 20 >"
                " m.getBoundingClientRect().left; }",
                arg=tab,
                timeout=60_000,
            )
            loss = f"{tab} svg[data-plot='loss']"
            throughput = f"{tab} svg[data-plot='throughput']"
            loss_points = int(
                page.get_attribute(f"{loss} [data-series='loss']", "data-points") or 0
            )
            rate_points = int(
                page.get_attribute(f"{throughput} [data-series='samples_per_s']", "data-points")
                or 0
            )
            loss_labels = _texts(page, f"{loss} .jp-ft-plot-label")
            rate_labels = _texts(page, f"{throughput} .jp-ft-plot-label")
            legend = _texts(page, f"{loss} .jp-ft-plot-legend-item")
            y_ticks = _texts(page, f"{loss} .jp-ft-plot-axis-y text:not(.jp-ft-plot-label)")
            head = page.inner_text(f"{tab} .jp-ft-dashboard-head")
            tab_label = page.inner_text(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")
            in_main = page.evaluate(
                "(run) => Array.from(window.jupyterapp.shell.widgets('main'))"
                ".some(w => w.id === 'ft-notebook-run-dashboard-' + run)",
                run,
            )
            DOCS.mkdir(exist_ok=True)
            page.screenshot(path=str(DOCS / "lab-docked-dashboard.png"))
            inline = int(
                page.get_attribute(
                    f"{row} svg[data-plot='loss'] [data-series='loss']", "data-points"
                )
                or 0
            )
            inline_labels = _texts(page, f"{row} svg[data-plot='loss'] .jp-ft-plot-label")
            page.locator(row).screenshot(path=str(DOCS / "lab-panel-plot.png"))
            screenshot(page, "lab-dashboards-docked")
    finally:
        handle.cancel()
    assert in_main, "the dashboard is not a widget of the main area"
    assert tab_label.strip() == f"Run {run}"
    assert run in head
    assert "RUNNING" in head or "RECOVERING" in head
    assert loss_points >= 12
    assert rate_points >= 12
    assert loss_labels == ["step", "loss (log scale)"]
    assert rate_labels == ["step", "samples/s"]
    assert legend[0] == "loss"
    assert {"worker lost", "recovered"} <= set(legend), legend
    assert y_ticks, "the loss axis has no ticks"
    assert inline >= 4
    assert inline_labels == ["step", "loss (log scale)"]
