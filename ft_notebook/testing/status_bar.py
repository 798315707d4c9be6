"""The JupyterLab status bar's own code, run on payloads the REST API serves: for tests
that check what the status bar says against what the run is.

The text and kind come from ``labextension/src/status.ts`` itself
(``summarizeStatus``), bundled with the extension's esbuild and run by Node, not from
a copy of its rules in Python (a second copy would one day disagree).
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

LABEXTENSION = Path(__file__).resolve().parents[2] / "labextension"
ESBUILD = LABEXTENSION / "node_modules" / ".bin" / "esbuild"


def available() -> str:
    """Why the status bar's code cannot run here (``""``: it can)."""
    if shutil.which("node") is None:
        return "no node on PATH"
    if not ESBUILD.exists():
        return f"{ESBUILD} is missing: build the extension first (make labextension)"
    return ""


@functools.cache
def _bundle() -> Path:
    out = Path(tempfile.mkdtemp(prefix="ft-status-bar-")) / "status.cjs"
    subprocess.run(
        [
            str(ESBUILD),
            str(LABEXTENSION / "src" / "status.ts"),
            "--bundle",
            "--platform=node",
            "--format=cjs",
            f"--outfile={out}",
            "--log-level=warning",
        ],
        check=True,
        timeout=120,
    )
    return out


_RUN = """
const status = require(process.argv[1]);
const views = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const now = Number(process.argv[2]);
const out = views.map(runs => status.summarizeStatus(
  {error: null, data: {clusters: [], runs: runs, snapshots: []}}, now));
process.stdout.write(JSON.stringify(out));
"""


def summaries(views: list[list[dict[str, Any]]], now: float | None = None) -> list[dict[str, Any]]:
    """What the status bar shows (``kind``, ``text``, ``title``) for each list of runs
    (``RunModel.to_json()`` payloads), with no cluster registered, at ``now``."""
    at_ms = (time.time() if now is None else now) * 1000
    done = subprocess.run(
        ["node", "-e", _RUN, str(_bundle()), str(at_ms)],
        input=json.dumps(views),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: list[dict[str, Any]] = json.loads(done.stdout)
    return result
