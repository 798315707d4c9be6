"""The Resilience sidebar, the status bar item and the commands in a real JupyterLab,
driven by a real Chromium: the page runs the build just made, lists the user's
private cluster with a tile per worker, shows a killed worker lost and back, and the
restore command brings a variable back into a restarted kernel. Screenshots are kept
(see ``_lab.py``); look at them."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from _lab import (
    KERNEL_IDLE,
    ROOT,
    Lab,
    LabServer,
    needs_chromium,
    open_page,
    run_lab,
    screenshot,
    write_notebook,
)

from ft_notebook.cluster import cluster, down, status
from ft_notebook.testing import poll_for

pytestmark = [pytest.mark.browser, pytest.mark.slow, needs_chromium]

BUILD = ROOT / "ft_notebook" / "labextension"
SOURCES = ROOT / "labextension" / "src"

#: Runs code in the kernel of the notebook in the main area; resolves to its output.
RUN_IN_KERNEL = """async (code) => {
    const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    const future = k.requestExecute({ code, store_history: false });
    let out = '';
    future.onIOPub = (msg) => {
        const c = msg.content;
        if (msg.header.msg_type === 'stream') { out += c.text; }
        if (msg.header.msg_type === 'error') { out += c.ename + ': ' + c.evalue; }
    };
    await future.done;
    return out;
}"""


@pytest.fixture
def lab(tmp_path: Path, ft_data_dir: Path) -> Iterator[Lab]:
    """JupyterLab over an empty folder; it and its kernels use the tests' data folder
    (cluster registry, journals, snapshots)."""
    root = tmp_path / "notebooks"
    root.mkdir()
    with run_lab(root, tmp_path, {"DASK_FT_NOTEBOOK__DATA_DIR": str(ft_data_dir)}) as server:
        yield server


@pytest.fixture
def private_pair(ft_data_dir: Path) -> Iterator[tuple[str, Any]]:
    """The user's private cluster (in the tests' data folder) with 2 workers."""
    name = f"t-lab-{uuid.uuid4().hex[:6]}"
    client = cluster(name=name, workers=2, set_as_default=False)
    try:
        yield name, client
    finally:
        client.close()
        down(name)


def test_the_page_runs_the_extension_just_built(lab: Lab) -> None:
    """An editable install copies the build once; a stale copy must not pass: the
    page must load the remote entry of the build in this checkout, made after the
    last change to the sources."""
    built = json.loads((BUILD / "package.json").read_text())["jupyterlab"]["_build"]["load"]
    entry = BUILD / built
    newest_source = max(p.stat().st_mtime for p in SOURCES.rglob("*.ts"))
    assert entry.stat().st_mtime >= newest_source, (
        f"{entry} is older than the sources in {SOURCES}: run `make labextension`"
    )
    with open_page(lab, "lab?reset", "labextension-build") as page:
        loaded = page.evaluate("() => performance.getEntriesByType('resource').map((e) => e.name)")
        page.wait_for_selector("#ft-notebook-panel", state="attached", timeout=30_000)
    ours = [u for u in loaded if "/ft-notebook-labextension/" in u and "remoteEntry" in u]
    assert [u.split("?")[0].rsplit("/", 1)[-1] for u in ours] == [entry.name], ours


@pytest.mark.parametrize(
    ("server_extension", "kind", "says"),
    [(True, "empty", "ft.cluster()"), (False, "no-server", "jupyter server extension enable")],
)
def test_the_panel_says_why_it_has_nothing_to_show(
    tmp_path: Path, server_extension: bool, kind: str, says: str
) -> None:
    """Nothing running (a data folder of its own), or the server extension off: a
    message that says what to do, never an empty panel."""
    root = tmp_path / "notebooks"
    root.mkdir()
    env = {"DASK_FT_NOTEBOOK__DATA_DIR": str(tmp_path / "data")}
    args = () if server_extension else ("--ServerApp.jpserver_extensions=ft_notebook=False",)
    with (
        run_lab(root, tmp_path, env, args) as server,
        open_page(server, "lab?reset", f"labextension-{kind}") as page,
    ):
        page.evaluate("() => window.jupyterapp.commands.execute('ft-notebook:open-panel')")
        message = page.wait_for_selector(f'.jp-ft-message[data-kind="{kind}"]')
        assert message is not None
        text = message.inner_text()
        screenshot(page, f"labextension-{kind}")
    assert says in text, text


def test_the_panel_and_status_bar_survive_a_restart_of_the_server(tmp_path: Path) -> None:
    """The server goes away under an open page: the status bar says so (the poller
    backs off); the server comes back on the same port: the panel recovers alone."""
    root = tmp_path / "notebooks"
    root.mkdir()
    server = LabServer(root, tmp_path, {"DASK_FT_NOTEBOOK__DATA_DIR": str(tmp_path / "data")})
    lab = server.start()
    try:
        with open_page(lab, "lab?reset", "labextension-server-restart") as page:
            page.evaluate("() => window.jupyterapp.commands.execute('ft-notebook:open-panel')")
            page.wait_for_selector('.jp-ft-message[data-kind="empty"]')
            server.stop()
            page.wait_for_selector('.jp-ft-status[data-state="error"]', timeout=30_000)
            screenshot(page, "labextension-server-gone")
            server.start()
            # the poller's backoff is at most 30 s; the page's own reconnects are separate
            page.wait_for_selector('.jp-ft-status[data-state="none"]', timeout=45_000)
            page.wait_for_selector('.jp-ft-message[data-kind="empty"]', timeout=5_000)
    finally:
        server.stop()


def test_the_panel_and_status_bar_follow_a_killed_worker(
    lab: Lab, private_pair: tuple[str, Any]
) -> None:
    """The worker is SIGKILLed; its replacement is SIGSTOPped as soon as the fork
    server forks it (it has not registered yet), so the worker stays gone for longer
    than the panel's poll period (a restart takes about 0.1 s); then the replacement
    goes on, registers, and the tile turns back."""
    name, client = private_pair
    rows = {w.name: w for w in status(client)}
    assert len(rows) == 2, rows
    victim = sorted(rows)[-1]
    worker = psutil.Process(rows[victim].pid)
    parent = worker.parent()  # the cluster's fork server (the daemon, with spawn)
    before = {c.pid for c in parent.children()}
    tile = f'.jp-ft-cluster[data-cluster="{name}"] .jp-ft-tile[data-worker="{victim}"]'
    probe = f"""() => [document.querySelector('{tile}')?.dataset.state,
                       document.querySelector('.jp-ft-status')?.dataset.healthy]"""
    states: list[str] = []
    healthy_seen: list[str] = []

    def watch(page: Any, until: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError(f"tile states {states}, healthy counts {healthy_seen}")
            state, healthy = page.evaluate(probe)
            if state and (not states or states[-1] != state):
                states.append(state)
            if healthy and (not healthy_seen or healthy_seen[-1] != healthy):
                healthy_seen.append(healthy)
            time.sleep(0.05)

    with open_page(lab, "lab?reset", "labextension-panel") as page:
        page.evaluate("() => window.jupyterapp.commands.execute('ft-notebook:open-panel')")
        page.wait_for_selector(f'.jp-ft-cluster[data-cluster="{name}"] .jp-ft-tile', timeout=30_000)
        page.wait_for_function(
            "document.querySelector('.jp-ft-status')?.dataset.healthy === '2'", timeout=30_000
        )
        screenshot(page, "labextension-1-healthy")
        worker.kill()
        killed_at = time.monotonic()
        replacement = poll_for(
            lambda: next((c for c in parent.children() if _new_worker(c, before)), None),
            timeout=10,
            max_interval=0.005,
            what="the nanny spawning a replacement",
        )
        replacement.suspend()
        try:
            watch(page, lambda: bool(states) and states[-1] == "lost", timeout_s=15)
            lost_after = time.monotonic() - killed_at
            screenshot(page, "labextension-2-lost")
        finally:
            replacement.resume()
        watch(page, lambda: states[-1] == "running" and healthy_seen[-1] == "2", timeout_s=90)
        screenshot(page, "labextension-3-back")
        status_text = page.inner_text(".jp-ft-status")
        restarts = page.inner_text(f"{tile} .jp-ft-tile-restarts")
    assert states[-2:] == ["lost", "running"], states
    # the poll period is 2 s; the scheduler notices the death at once (closed connection)
    assert lost_after < 5.0, lost_after
    assert "1" in healthy_seen, healthy_seen
    assert "2/2" in status_text, status_text
    assert restarts == "restarted 1×", restarts


def test_a_run_shows_healthy_while_it_trains_and_gone_with_its_cluster(
    lab: Lab, private_pair: tuple[str, Any], tmp_path: Path
) -> None:
    """Issue 33, as a person saw it in the panel: a healthy running run had a grey
    UNKNOWN badge, and once its cluster was gone the run stayed RUNNING while the
    status bar kept counting its checkpoint's age. Now the badge says HEALTHY while it
    trains; when the cluster is killed outright (it cannot say its runs ended), the
    row says CLUSTER GONE and the status bar counts no checkpoint age."""
    from ft_notebook.cluster import clusters
    from ft_notebook.testing.training import counting_problem
    from ft_notebook.train import fit

    name, client = private_pair
    run = f"t-panel-{uuid.uuid4().hex[:6]}"
    fit(
        epochs=1000,
        cluster=client,
        name=run,
        store=str(tmp_path / "ckpt"),
        checkpoint_every=2,
        wait=False,
        **counting_problem(delay_s=0.05),
    )
    row = f'.jp-ft-run[data-run="{run}"]'
    with open_page(lab, "lab?reset", "labextension-run") as page:
        page.evaluate("() => window.jupyterapp.commands.execute('ft-notebook:open-panel')")
        page.wait_for_selector(f'{row}[data-state="RUNNING"]', timeout=60_000)
        page.wait_for_function(
            "document.querySelector('.jp-ft-status')?.innerText.includes('ckpt')",
            timeout=60_000,
        )
        health = page.get_attribute(row, "data-health")
        screenshot(page, "labextension-run-1-training")
        [info] = [c for c in clusters() if c.name == name]
        psutil.Process(info.pid).kill()  # the whole cluster; its workers follow
        page.wait_for_selector(f'{row}[data-state="CLUSTER GONE"]', timeout=60_000)
        page.wait_for_function(
            "!document.querySelector('.jp-ft-status')?.innerText.includes('ckpt')",
            timeout=30_000,
        )
        screenshot(page, "labextension-run-2-cluster-gone")
        gone_health = page.get_attribute(row, "data-health")
        badge = page.inner_text(f"{row} .jp-ft-run-state")
    assert health == "HEALTHY"
    assert (badge, gone_health) == ("CLUSTER GONE", "LOST")


def _new_worker(process: psutil.Process, before: set[int]) -> bool:
    """A worker process started since ``before``: forked by the cluster's fork server
    (whose command line its forks keep), or spawned (multiprocessing's spawn_main)."""
    try:
        command = " ".join(process.cmdline())
        return process.pid not in before and ("forkserver" in command or "spawn_main" in command)
    except psutil.Error:  # gone meanwhile
        return False


def _snapshots(lab: Lab, notebook: str) -> list[dict[str, Any]]:
    url = lab.url(f"ft-notebook/api/snapshots?path={urllib.parse.quote(notebook)}")
    with urllib.request.urlopen(url, timeout=10) as r:
        rows: list[dict[str, Any]] = json.load(r)
    return rows


@contextlib.contextmanager
def _notebook_with_a_snapshot(lab: Lab, tmp_path: Path, name: str, cell: str) -> Iterator[Any]:
    """``name`` open in the page, its one cell run and snapshotted by the panel's
    command; the server lists the snapshot under the notebook's path."""
    write_notebook(tmp_path / "notebooks" / name, [cell])
    with open_page(lab, f"lab/tree/{name}?reset", f"labextension-{Path(name).stem}") as page:
        page.wait_for_function(KERNEL_IDLE, timeout=90_000)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.evaluate("() => window.jupyterapp.commands.execute('ft-notebook:snapshot')")
        # the server finds the snapshot under the notebook's path, as the panel asks
        poll_for(lambda: _snapshots(lab, name), timeout=30, what="the snapshot")
        yield page


def test_the_restore_command_brings_a_variable_back_into_a_restarted_kernel(
    lab: Lab, tmp_path: Path
) -> None:
    with _notebook_with_a_snapshot(lab, tmp_path, "restore.ipynb", "secret = 6 * 7") as page:
        assert page.evaluate(RUN_IN_KERNEL, "print(secret)").strip() == "42"
        page.evaluate("() => window.jupyterapp.commands.execute('ft-notebook:open-panel')")
        page.wait_for_selector('.jp-ft-snapshots[data-path="restore.ipynb"] .jp-ft-snapshot')
        page.evaluate(
            "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()"
        )
        page.wait_for_function(KERNEL_IDLE, timeout=90_000)
        assert "NameError" in page.evaluate(RUN_IN_KERNEL, "print(secret)")
        page.evaluate("() => window.jupyterapp.commands.execute('ft-notebook:restore')")
        restored = poll_for(
            lambda: (out := page.evaluate(RUN_IN_KERNEL, "print(secret)").strip()) == "42" and out,
            timeout=30,
            what="secret restored",
        )
        screenshot(page, "labextension-4-restored")
    assert restored == "42"


def test_a_notebook_renamed_in_the_page_keeps_its_snapshots_in_the_panel(
    lab: Lab, tmp_path: Path
) -> None:
    with _notebook_with_a_snapshot(lab, tmp_path, "draft.ipynb", "answer = 42") as page:
        # as the file browser's "Rename" does: through Jupyter's contents API
        page.evaluate(
            "() => window.jupyterapp.serviceManager.contents.rename('draft.ipynb', 'final.ipynb')"
        )
        renamed = poll_for(
            lambda: _snapshots(lab, "final.ipynb"), timeout=30, what="the renamed notebook's"
        )
        page.evaluate("() => window.jupyterapp.commands.execute('ft-notebook:open-panel')")
        note = page.wait_for_selector(
            '.jp-ft-snapshots[data-path="final.ipynb"] .jp-ft-snapshots-renamed', timeout=30_000
        )
        screenshot(page, "labextension-5-renamed")
        text = note.text_content() if note is not None else ""
    old = renamed[0]["renamed_from"]
    assert old.startswith("draft-")
    assert [s["renamed_from"] for s in renamed] == [old]
    assert f"(as {old})" in text
