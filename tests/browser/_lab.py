"""A real ``jupyter lab`` and a real Chromium for the browser tests.

:func:`run_lab` starts JupyterLab on a free port with a token, its own settings and
workspaces, serving a folder of the test; :func:`open_page` drives Debian's Chromium
through Python Playwright (never a browser Playwright downloads), keeps the page's
console and takes a screenshot when the test fails. Screenshots go to
``FT_SCREENSHOTS`` (by default ``.screenshots/`` at the repository root); look at them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ft_notebook.testing import poll_for

ROOT = Path(__file__).parents[2]
SHOTS = Path(os.environ.get("FT_SCREENSHOTS", ROOT / ".screenshots"))
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
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Chromium (make test installs it as root)"
)

#: True once the notebook in the main area has a kernel that is idle.
KERNEL_IDLE = (
    "(() => { const w = window.jupyterapp.shell.currentWidget;"
    " const k = w && w.sessionContext && w.sessionContext.session"
    " && w.sessionContext.session.kernel; return !!k && k.status === 'idle'; })()"
)


@dataclass(frozen=True)
class Lab:
    base: str
    token: str
    log: Path

    def url(self, path: str) -> str:
        """``path`` (e.g. ``lab/tree/x.ipynb?reset``) with the token."""
        joiner = "&" if "?" in path else "?"
        return f"{self.base}/{path}{joiner}token={self.token}"


def write_notebook(path: Path, cells: Sequence[str]) -> None:
    """A notebook of code ``cells`` at ``path``, with a kernelspec (without one,
    JupyterLab asks which kernel to start)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(nb, path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LabServer:
    """A ``jupyter lab`` process that can be stopped and started again on the same
    port and token (a page open on it then sees the server go and come back)."""

    def __init__(
        self, root: Path, work: Path, env: Mapping[str, str] | None = None, args: Sequence[str] = ()
    ) -> None:
        port, token = _free_port(), uuid.uuid4().hex
        self.lab = Lab(f"http://127.0.0.1:{port}", token, work / "lab.log")
        # no "fetch news?" toast over the page
        settings = work / "lab-settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True)
        (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
        self.env = dict(
            os.environ,
            JUPYTERLAB_SETTINGS_DIR=str(work / "lab-settings"),
            JUPYTERLAB_WORKSPACES_DIR=str(work / "lab-workspaces"),
            **(env or {}),
        )
        self.cmd = [
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
            *args,
        ]
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> Lab:
        with self.lab.log.open("a") as log:  # the child keeps its own copy of the fd
            self._process = subprocess.Popen(
                self.cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        poll_for(self._up, timeout=60, what="jupyter lab answering")
        return self.lab

    def stop(self) -> None:
        server, self._process = self._process, None
        if server is None:
            return
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)

    def _up(self) -> bool:
        try:
            with urllib.request.urlopen(self.lab.url("api/status"), timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False


@contextlib.contextmanager
def run_lab(
    root: Path, work: Path, env: Mapping[str, str] | None = None, args: Sequence[str] = ()
) -> Iterator[Lab]:
    """``jupyter lab`` serving ``root``; its settings, workspaces and log in ``work``;
    ``args``: more command-line options."""
    server = LabServer(root, work, env, args)
    try:
        yield server.start()
    finally:
        server.stop()


@contextlib.contextmanager
def open_page(lab: Lab, path: str, name: str) -> Iterator[Any]:
    """A Chromium page at ``path`` of ``lab`` with JupyterLab started; on failure a
    screenshot ``{name}-failed.png``; always the console in ``{name}-console.log``."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    console: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = None
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            page.goto(lab.url(path))
            page.wait_for_function("window.jupyterapp !== undefined", timeout=60_000)
            page.evaluate("() => window.jupyterapp.started")  # every plugin activated
            yield page
        except BaseException:
            if page is not None:
                with contextlib.suppress(Exception):
                    page.screenshot(path=str(SHOTS / f"{name}-failed.png"), full_page=True)
            raise
        finally:
            (SHOTS / f"{name}-console.log").write_text("\n".join(console))
            browser.close()


def screenshot(page: Any, name: str) -> Path:
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
