"""The dashboard in a real JupyterLab, in a real Chromium: a notebook trains, a worker
is killed, and the page shows the worker's tile go LOST and back and the badge go
DEGRADED and back to HEALTHY. Screenshots are kept (``FT_SCREENSHOTS``, by default
``.screenshots/`` at the repository root); look at them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from distributed import Client

from ft_notebook.testing import poll_for, training_cluster

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

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


@pytest.fixture(scope="module")
def trio() -> Iterator[Client]:
    with training_cluster(3) as client:
        yield client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def lab(
    trio: Client, tmp_path: Path, ft_data_dir: Path, unique_name: str
) -> Iterator[dict[str, Any]]:
    """A real ``jupyter lab`` serving ``tmp_path``, whose kernels reach the trio."""
    port, token = _free_port(), uuid.uuid4().hex
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    # without a kernelspec, JupyterLab asks which kernel to start
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    root = tmp_path / "notebooks"
    root.mkdir()
    nbformat.write(nb, root / "dashboard.ipynb")
    # JupyterLab settings and workspaces of this test only; no "fetch news?" toast
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = dict(
        os.environ,
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "lab-workspaces"),
        FT_TEST_SCHEDULER=trio.scheduler.address,
        FT_TEST_RUN=unique_name,
        FT_TEST_STORE=str(tmp_path / "ckpt"),  # outside the notebooks' folder
        DASK_FT_NOTEBOOK__DATA_DIR=str(ft_data_dir),
    )
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--allow-root",
        f"--port={port}",
        "--ServerApp.ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=None",
        "--LabApp.expose_app_in_browser=True",
    ]
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        poll_for(up, timeout=60, what="jupyter lab answering")
        yield {"base": base, "token": token, "run": unique_name, "log": tmp_path / "lab.log"}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        log.close()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (make test installs it as root)")
def test_the_page_shows_the_tile_and_the_badge_change(lab: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    shots = Path(os.environ.get("FT_SCREENSHOTS", ROOT / ".screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    seen: dict[str, list[str]] = {"tile": [], "badge": [], "state": []}
    console: list[str] = []  # the page's console, kept beside the screenshots
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            page.goto(f"{lab['base']}/lab/tree/dashboard.ipynb?reset&token={lab['token']}")
            page.wait_for_function("window.jupyterapp !== undefined", timeout=60_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            page.wait_for_function(
                "(() => { const w = window.jupyterapp.shell.currentWidget;"
                " const k = w && w.sessionContext && w.sessionContext.session"
                " && w.sessionContext.session.kernel; return !!k && k.status === 'idle'; })()",
                timeout=90_000,
            )
            # not awaited: the command's promise ends when the whole notebook has run
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            page.wait_for_selector(".ft-badge", timeout=120_000)
            console.append(f"badge shown at {time.time()}")
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
                    page.screenshot(path=str(shots / "dashboard-1-healthy.png"), full_page=True)
                    shot["healthy"] = True
                if health in ("DEGRADED", "RECOVERING") and not shot["degraded"]:
                    page.screenshot(path=str(shots / "dashboard-2-degraded.png"), full_page=True)
                    shot["degraded"] = True
                if state == "COMPLETED":
                    break
                time.sleep(0.05)
            page.wait_for_timeout(1500)  # the chart's last points
            page.screenshot(path=str(shots / "dashboard-3-completed.png"), full_page=True)
        except BaseException:
            page.screenshot(path=str(shots / "dashboard-failed.png"), full_page=True)
            raise
        finally:
            browser.close()
    (shots / "dashboard-sequence.json").write_text(json.dumps(seen, indent=1))
    (shots / "dashboard-console.log").write_text("\n".join(console))
    assert seen["state"], seen
    assert seen["state"][-1] == "COMPLETED", seen
    assert "LOST" in seen["tile"], seen
    assert "TRAINING" in seen["tile"][seen["tile"].index("LOST") :], seen
    assert "DEGRADED" in seen["badge"], seen
    assert "HEALTHY" in seen["badge"][seen["badge"].index("DEGRADED") :], seen
