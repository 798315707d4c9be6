"""A run's dashboard in a real IPython shell shows the snapshots of the notebook it is
shown in, never another notebook's, and none before ``%load_ext ft_notebook``.

The shell runs in a fresh interpreter, as a kernel would: ``get_ipython()`` must not
leak into the other tests of this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_SHELL = """
import json
from IPython.core.interactiveshell import InteractiveShell
from ft_notebook.events import SnapshotCommitted, publish, session_topic
from ft_notebook.widgets import dashboard

shell = InteractiveShell.instance()

def run(cell):
    result = shell.run_cell(cell)
    assert result.success, (cell, result.error_in_exec or result.error_before_exec)

def shown(live):
    return {"line": live.state.snapshot_line(), "text": live.state.text()}

# a snapshot of another notebook, committed by another kernel
publish(SnapshotCommitted("latest", 1024, 1, notebook="another-1a2b3c4d"), session_topic())
before = dashboard("r")  # no %load_ext ft_notebook yet: no snapshots of its own
run("%load_ext ft_notebook")
run("x = list(range(1000))")
run("%ft save")
# the newest snapshot of all: of the other notebook, the size the bug report saw
publish(SnapshotCommitted("latest", 7_969_178, 40, notebook="another-1a2b3c4d"), session_topic())
after = dashboard("r")  # replays the session journal before it returns
report = {"before": shown(before), "after": shown(after)}
before.close()
after.close()
print(json.dumps(report))
"""


def test_a_run_dashboard_shows_the_snapshot_of_its_own_notebook(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        DASK_FT_NOTEBOOK__DATA_DIR=str(tmp_path / "data"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        JPY_SESSION_NAME=str(tmp_path / "train.ipynb"),
    )
    env.pop("DASK_INTERNAL_INHERIT_CONFIG", None)
    out = subprocess.run(
        [sys.executable, "-c", _SHELL], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    line = report["after"]["line"]
    assert line.startswith("last snapshot 'latest' "), report["after"]["text"]
    assert line.endswith(", 1 variables, nothing lost")  # x, of this notebook's save
    assert "7.6 MB" not in line  # the other notebook's, although newer
    assert "1.0 KB" not in line  # the other notebook's older one
    assert report["before"]["line"] == ""
    assert "snapshot" not in report["before"]["text"]
