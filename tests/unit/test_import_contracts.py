"""The import direction of DESIGN.md is enforced by import-linter, in make test too."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_the_package_keeps_every_contract() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_import_against_the_flow_breaks_the_build(tmp_path: Path) -> None:
    shutil.copytree(
        ROOT / "ft_notebook",
        tmp_path / "ft_notebook",
        ignore=shutil.ignore_patterns("labextension"),
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with (tmp_path / "ft_notebook" / "config.py").open("a") as f:
        f.write("\nimport ft_notebook.events  # config must never know about events\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "ft_notebook.config is not allowed to import ft_notebook.events" in result.stdout
