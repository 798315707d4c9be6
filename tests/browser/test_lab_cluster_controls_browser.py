"""The panel's cluster controls in a real JupyterLab driven by a real Chromium: a
cluster started from the sidebar's dialog gets its worker tiles, scales from the
panel, its Dask dashboard opens through the Jupyter server (and not without its
login), and Stop (confirmed in a dialog) leaves none of its processes; the status bar
shows the notebook kernel's memory beside the cluster's, and a snapshot row its
variable names. Its screenshot goes to the screenshots folder (the README's
docs/lab-cluster-controls.png is a copy of it)."""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import pytest
from _lab import KERNEL_IDLE, SHOTS, Lab, needs_chromium, open_page, run_lab, write_notebook

from ft_notebook.cluster import clusters, down
from ft_notebook.testing import poll_for

pytestmark = [pytest.mark.browser, pytest.mark.slow, needs_chromium]

#: docs/lab-cluster-controls.png in the README is a copy of it (a test run leaves docs/ as
#: it is)
DOC_SHOT = SHOTS / "lab-cluster-controls.png"
NAME = "lab-ui"
VARIABLES = ["learning_rate", "batch_size", "epochs", "weights", "losses", "notes"]
CLUSTER = f'.jp-ft-cluster[data-cluster="{NAME}"]'


@pytest.fixture
def lab(tmp_path: Path, isolated_data_dir: Path) -> Iterator[Lab]:
    """JupyterLab whose server and kernels use this test's data folder; clusters it
    starts have a dashboard (on a free port)."""
    root = tmp_path / "notebooks"
    root.mkdir()
    env = {
        "DASK_FT_NOTEBOOK__DATA_DIR": str(isolated_data_dir),
        "DASK_FT_NOTEBOOK__CLUSTER__DASHBOARD_PORT": "0",
    }
    try:
        with run_lab(root, tmp_path, env) as server:
            yield server
    finally:
        for info in clusters():  # a failed test leaves no cluster running
            down(info.name)


def _kernel_pid(kernel_id: str) -> int:
    """The kernel's process, found by its connection file's name, not by our API."""
    for proc in psutil.process_iter(["cmdline"]):
        if any(f"kernel-{kernel_id}.json" in arg for arg in proc.info["cmdline"] or ()):
            return int(proc.pid)
    raise AssertionError(f"no process runs kernel {kernel_id}")


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def _tiles(page: Any) -> list[list[str]]:
    rows: list[list[str]] = page.evaluate(
        f"""() => Array.from(document.querySelectorAll('{CLUSTER} .jp-ft-tile'))
                     .map(t => [t.dataset.worker, t.dataset.state])"""
    )
    return sorted(rows)


def test_start_scale_dashboard_and_stop_a_cluster_from_the_sidebar(
    lab: Lab, tmp_path: Path
) -> None:
    cell = "\n".join(f"{name} = {i}" for i, name in enumerate(VARIABLES))
    write_notebook(tmp_path / "notebooks" / "train.ipynb", [cell])
    with open_page(lab, "lab/tree/train.ipynb?reset", "lab-cluster-controls") as page:
        page.wait_for_function(KERNEL_IDLE, timeout=90_000)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.evaluate("() => window.jupyterapp.commands.execute('ft-notebook:snapshot')")
        page.evaluate("() => window.jupyterapp.commands.execute('ft-notebook:open-panel')")

        # a snapshot row names its variables; the tooltip lists all of them
        shown = page.wait_for_selector(".jp-ft-snapshot .jp-ft-snapshot-variables", timeout=60_000)
        assert shown is not None
        listed = (shown.get_attribute("title") or "").split(", ")
        assert set(VARIABLES) <= set(listed), listed
        more = len(listed) - 4
        assert shown.inner_text() == f"{', '.join(listed[:4])} +{more} more", shown.inner_text()

        # start: the dialog asks for a name and workers
        page.click(".jp-ft-cluster-start")
        page.fill(".jp-Dialog .jp-ft-start-name", NAME)
        page.fill(".jp-Dialog .jp-ft-start-workers", "1")
        page.click(".jp-Dialog .jp-mod-accept")
        page.wait_for_selector(f'{CLUSTER} .jp-ft-tile[data-state="running"]', timeout=90_000)
        assert _tiles(page) == [["cpu0", "running"]]
        [info] = clusters()
        assert (info.name, list(info.workers)) == (NAME, ["cpu0"])
        assert _alive([info.pid, *info.workers.values()]) == [info.pid, *info.workers.values()]

        # scale up from the panel: a second worker process joins
        page.click(f"{CLUSTER} .jp-ft-cluster-scale-up")
        poll_for(
            lambda: _tiles(page) == [["cpu0", "running"], ["cpu1", "running"]],
            timeout=60,
            what="two running tiles",
        )
        # the tiles are the scheduler's; the registry's pids come from the daemon's
        # rewrite of its entry, every second
        info = poll_for(
            lambda: (c := clusters()) and sorted(c[0].workers) == ["cpu0", "cpu1"] and c[0],
            timeout=10,
            what="the registry to list both workers",
        )
        children = {c.pid for c in psutil.Process(info.pid).children(recursive=True)}
        assert set(info.workers.values()) <= children

        # the status bar: this kernel's memory beside the cluster's two workers
        kernel_id = page.evaluate(
            "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id"
        )
        page.wait_for_function(
            "document.querySelector('.jp-ft-memory')?.innerText.includes('cluster 2 workers')",
            timeout=30_000,
        )
        memory = page.inner_text(".jp-ft-memory")
        assert re.fullmatch(r"kernel [\d.]+ [KMG]B · cluster 2 workers [\d.]+ [KMG]B", memory)
        shown_rss = int(page.get_attribute(".jp-ft-memory", "data-kernel-rss") or 0)
        real_rss = psutil.Process(_kernel_pid(kernel_id)).memory_info().rss
        assert shown_rss == pytest.approx(real_rss, rel=0.3)

        DOC_SHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(DOC_SHOT))

        # the dashboard link goes through the Jupyter server
        href = page.get_attribute(f"{CLUSTER} .jp-ft-cluster-dashboard", "href") or ""
        port = urlsplit(info.dashboard or "").port
        assert href == f"{lab.base}/proxy/{port}/status", (href, info.dashboard)
        # a second tab of the same login (the lab page's cookies)
        tab = page.context.browser.new_context()
        try:
            tab.add_cookies(page.context.cookies())
            dashboard = tab.new_page()
            answer = dashboard.goto(href)
            assert answer is not None
            assert answer.status == 200
            assert "Dask" in dashboard.title() or "Dask" in dashboard.content()
        finally:
            tab.close()
        anonymous = http.client.HTTPConnection(urlsplit(lab.base).netloc, timeout=10)
        anonymous.request("GET", urlsplit(href).path)
        refused = anonymous.getresponse()
        assert refused.status in (302, 403), refused.status
        assert "login" in (refused.getheader("Location") or "login")
        anonymous.close()

        # stop, confirmed in a dialog: the daemon and its workers are gone
        pids = [info.pid, *info.workers.values()]
        page.click(f"{CLUSTER} .jp-ft-cluster-stop")
        page.wait_for_selector(".jp-Dialog", timeout=10_000)
        assert f"Stop cluster {NAME}?" in page.inner_text(".jp-Dialog")
        page.click(".jp-Dialog .jp-mod-accept")
        page.wait_for_selector(CLUSTER, state="detached", timeout=60_000)
        poll_for(lambda: not _alive(pids), timeout=30, what="the cluster's processes exiting")
        assert clusters() == []
        page.wait_for_function(
            "!document.querySelector('.jp-ft-memory')?.innerText.includes('cluster')",
            timeout=30_000,
        )
