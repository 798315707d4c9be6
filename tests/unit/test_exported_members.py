from __future__ import annotations

import subprocess
import sys

import ft_notebook


def test_all_is_sorted_and_every_name_exists() -> None:
    assert ft_notebook.__all__ == sorted(ft_notebook.__all__)
    missing = [name for name in ft_notebook.__all__ if not hasattr(ft_notebook, name)]
    assert missing == []


def test_public_names_are_in_all() -> None:
    public = {n for n in vars(ft_notebook) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(ft_notebook, n)).__name__ == "module"}
    assert public - modules - {"annotations"} <= set(ft_notebook.__all__)


def test_import_leaves_heavy_dependencies_unloaded() -> None:
    code = (
        "import sys, ft_notebook, ft_notebook.events, ft_notebook.exceptions\n"
        "print(sorted(m for m in ('torch', 'dask', 'distributed') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
