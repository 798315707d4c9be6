"""``make lab`` starts JupyterLab without its news question (issue 38).

The front end asks "Would you like to get notified about official Jupyter news?"
whatever ``--LabApp.news_url`` says: it reads only the ``fetchNews`` setting of
``@jupyterlab/apputils-extension:notification``. The Makefile writes that setting to
the venv's settings overrides; this checks that ``make lab`` writes it and that
JupyterLab's settings code then serves ``fetchNews: "false"``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_make_lab_turns_the_news_question_off(tmp_path: Path) -> None:
    from jupyterlab_server.settings_utils import get_settings

    venv = tmp_path / "venv"
    planned = subprocess.run(
        ["make", "-n", "lab", f"VENV={venv}", f"PY={sys.executable}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    written = re.search(r"^echo '(.+)' > (\S+/overrides\.json)$", planned, flags=re.M)
    assert written is not None, planned
    assert Path(written[2]) == venv / "share/jupyter/lab/settings/overrides.json"
    settings = tmp_path / "settings"
    settings.mkdir()
    (settings / "overrides.json").write_text(written[1])
    schemas = Path(sys.prefix) / "share/jupyter/lab/schemas"
    served, _ = get_settings(
        str(settings),
        str(schemas),
        str(tmp_path / "user"),
        "@jupyterlab/apputils-extension:notification",
    )
    assert served["schema"]["properties"]["fetchNews"]["default"] == "false"
