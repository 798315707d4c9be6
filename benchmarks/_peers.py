"""The snapshot tools users reach for instead, set up the same way for every benchmark.

- **ft**: ``%load_ext ft_notebook`` and ``%ft auto on`` (or ``%ft save`` cells);
  restored by ``%ft restore``.
- **dill**: ``dill.dump_session`` from a post-run hook, written to a temporary file
  and renamed, so a failed dump keeps the last good one; restored by
  ``dill.load_session``.
- **Kishu** 0.3.4 (``init_kishu()``, a commit after every cell), installed on first use
  into ``benchmarks/.venv-kishu`` (gitignored), whose kernels see this project's
  packages through a ``.pth`` file: one pandas, one torch; restored by
  ``init_kishu()`` and ``checkout`` of the newest commit.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KISHU_VENV = HERE / ".venv-kishu"
KISHU = "kishu==0.3.4"

# leaves no name behind: the namespace compared after the restore is the notebook's own
WAIT_FT = "__import__('ft_notebook.magics').magics.snapshots_of(get_ipython()).session.wait()"

DILL_HOOK = """
import dill as _dill, os as _os
def _ft_bench_dump(result):
    try:
        _dill.dump_session('{path}.tmp')
        _os.replace('{path}.tmp', '{path}')
    except Exception as e:
        print('dill dump failed:', type(e).__name__, e)
get_ipython().events.register('post_run_cell', _ft_bench_dump)
"""


def peer_python(venv: Path, requirement: str, module: str) -> str:
    """The Python of a peer tool's own venv (gitignored), made on first use: it sees this
    project's packages through a ``.pth`` file (one torch, one pandas), and gets
    ``requirement`` installed unless ``module`` imports already."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        pth = venv / "lib" / version / "site-packages" / "ft-notebook-venv.pth"
        pth.write_text(site.getsitepackages()[0] + "\n")
    done = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True)
    if done.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], check=True)
    return str(python)


def kishu_python() -> str:
    """The Kishu venv's Python, made on first use."""
    return peer_python(KISHU_VENV, KISHU, "kishu")


def python_of(arm: str) -> str | None:
    """The interpreter an arm's kernels run (None: this one's)."""
    return kishu_python() if arm == "kishu" else None


def environment(arm: str, work: Path, nb_path: Path) -> dict[str, str]:
    """A kernel's environment: every tool's data under ``work``."""
    return dict(
        os.environ,
        JPY_SESSION_NAME=str(nb_path),
        DASK_FT_NOTEBOOK__DATA_DIR=str(work / "ft-data"),
        TEST_NOTEBOOK_PATH=str(nb_path),
        ENV_KISHU_TEST_MODE="1",
        KISHU_PATH_ROOT=str(work / "kishu-root"),
        IPYTHONDIR=str(work / "ipython"),
        JUPYTER_RUNTIME_DIR=str(work / "runtime"),
    )


def setup_cells(arm: str, work: Path, *, auto: bool = True) -> list[str]:
    return {
        "none": [],
        "ft": ["%load_ext ft_notebook", *(["%ft auto on"] if auto else [])],
        "dill": [DILL_HOOK.format(path=work / "session.pkl")],
        "kishu": ["from kishu import init_kishu; init_kishu()"],
    }[arm]


def restore_cells(arm: str, work: Path, nb_path: Path, env: dict[str, str]) -> list[str]:
    """One cell, as a user types it after a crash."""
    if arm == "kishu":
        return [
            "from kishu import init_kishu; init_kishu()",
            f"_kishu.checkout({kishu_head(nb_path, env)!r})",
        ]
    return {
        "ft": ["%load_ext ft_notebook", "%ft restore"],
        "dill": [f"import dill; dill.load_session({str(work / 'session.pkl')!r})"],
    }[arm]


def store_of(arm: str, work: Path) -> Path:
    return {"ft": work / "ft-data", "dill": work / "session.pkl", "kishu": work / "bench.kishudb"}[
        arm
    ]


def kishu_head(nb_path: Path, env: dict[str, str]) -> str:
    code = (
        "import sys; from pathlib import Path; from kishu.commands import KishuCommand; "
        "print(KishuCommand.log_all(Path(sys.argv[1])).head.commit_id)"
    )
    done = subprocess.run(
        [kishu_python(), "-c", code, str(nb_path)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def write_notebook(path: Path) -> None:
    """An empty notebook file: Kishu keys its commits by the notebook's path."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, str(path))
