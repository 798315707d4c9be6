"""The ``%ft`` / ``%%ft`` magics: the notebook's front door to ft_notebook.

``%load_ext ft_notebook`` (or ``ft_notebook`` in IPython's ``extensions`` config)
registers them and starts recording cells for snapshots.
"""

from __future__ import annotations

from typing import Any

from ft_notebook.magics._ft import FTMagics

__all__ = ["FTMagics", "load_ipython_extension", "snapshots_of", "unload_ipython_extension"]

_LOADED: dict[int, Any] = {}


def load_ipython_extension(shell: Any) -> None:
    # numpy before our modules: the store imports it anyway, and when its import began
    # inside theirs under %load_ext it took about 15 ms longer (median of 25 restores
    # in fresh kernels; numpy's typing modules ran 3-4x slower, for a reason not found)
    import numpy  # noqa: F401

    from ft_notebook.session import ShellSnapshots, notebook_key, snapshot_store

    if id(shell) in _LOADED:
        return
    key = notebook_key(shell)
    snapshots = ShellSnapshots(shell, snapshot_store(), key)
    shell.register_magics(FTMagics(shell, snapshots))
    _LOADED[id(shell)] = snapshots


def snapshots_of(shell: Any) -> Any:
    """The snapshot machinery ``%load_ext ft_notebook`` attached to ``shell``."""
    try:
        return _LOADED[id(shell)]
    except KeyError:
        raise LookupError(
            "ft_notebook is not loaded in this shell: run `%load_ext ft_notebook`"
        ) from None


def unload_ipython_extension(shell: Any) -> None:
    snapshots = _LOADED.pop(id(shell), None)
    if snapshots is not None:
        snapshots.close()
