"""``%load_ext ft_notebook`` and ``%ft restore`` load only what the restore needs.

A restore in a fresh kernel must beat re-running a small notebook; Dask alone takes
about 0.1 s to import, torch more. Each step runs in a fresh interpreter, through a
real IPython shell, as a kernel would run it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# PyYAML too: parsing the defaults took 25 ms (they are compiled into _defaults.py)
HEAVY = ("dask", "distributed", "torch", "bokeh", "ipywidgets", "jupyter_server", "fsspec", "yaml")
# and parts of ft_notebook a restore does not use (each costs it milliseconds)
UNUSED = (
    "ft_notebook._settings",
    "ft_notebook.cluster._registry",
    "ft_notebook.cluster._status",
    "ft_notebook.store._async",
    "ft_notebook.session._outcomes",
    "ft_notebook.store._encode",
    "ft_notebook.store._staging",
    "ft_notebook.store._tensors",
)

_SHELL = """
import dataclasses, json, sys
from IPython.core.interactiveshell import InteractiveShell
made = []
_process_class = dataclasses._process_class

def recording(cls, *args):  # every dataclass created from now on
    made.append(f"{{cls.__module__}}.{{cls.__qualname__}}")
    return _process_class(cls, *args)

dataclasses._process_class = recording
shell = InteractiveShell.instance()
heavy = {heavy!r}
unused = {unused!r}

def loaded():
    tops = {{m.split(".")[0] for m in sys.modules}}
    return sorted((tops & set(heavy)) | (set(sys.modules) & set(unused)))

def run(cell):
    result = shell.run_cell(cell)
    assert result.success, (cell, result.error_in_exec or result.error_before_exec)

report = {{}}
for step, cells in {steps!r}:
    for cell in cells:
        run(cell)
    report[step] = loaded()
report["table"] = repr(shell.user_ns.get("table"))
# sys.modules keeps the order in which imports began
watched = ("numpy", "ft_notebook.session", "ft_notebook.store")
report["order"] = [m for m in sys.modules if m in watched]
report["twice(21)"] = shell.user_ns["twice"](21) if "twice" in shell.user_ns else None
report["dataclasses"] = sorted(m for m in made if m.startswith("ft_notebook."))
print(json.dumps(report))
"""


def _shell(tmp_path: Path, steps: list[tuple[str, list[str]]]) -> dict[str, object]:
    env = dict(
        os.environ,
        DASK_FT_NOTEBOOK__DATA_DIR=str(tmp_path / "data"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        JPY_SESSION_NAME=str(tmp_path / "nb.ipynb"),
    )
    env.pop("DASK_INTERNAL_INHERIT_CONFIG", None)
    code = _SHELL.format(heavy=HEAVY, unused=UNUSED, steps=steps)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    report: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


def test_load_ext_and_restore_import_no_dask_torch_or_server(tmp_path: Path) -> None:
    saved = _shell(
        tmp_path,
        [
            ("load_ext", ["%load_ext ft_notebook"]),
            ("save", ["table = {'a': [1, 2, 3]}\ntwice = lambda v: v * 2", "%ft save"]),
        ],
    )
    assert saved["load_ext"] == []
    restored = _shell(
        tmp_path,
        [("load_ext", ["%load_ext ft_notebook"]), ("restore", ["%ft restore"])],
    )
    assert restored["load_ext"] == [], "%load_ext ft_notebook imported these"
    # numpy's import ran about 20 ms slower in kernels when it began inside ours
    assert restored["order"] == ["numpy", "ft_notebook.session", "ft_notebook.store"]
    assert restored["restore"] == [], "%ft restore imported these"
    # a dataclass takes 0.5 ms to create on Python 3.11, a NamedTuple 0.1: the records
    # a restore reads are NamedTuples, and only these public results are dataclasses
    assert restored["dataclasses"] == [
        "ft_notebook.session._restore.RestoreReport",
        "ft_notebook.store._types.Checkpoint",
        "ft_notebook.store._types.CheckpointInfo",
    ]
    # and it did restore, with what it loaded on demand (cloudpickle for the lambda)
    assert restored["table"] == "{'a': [1, 2, 3]}"
    assert restored["twice(21)"] == 42
