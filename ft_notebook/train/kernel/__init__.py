"""The kernel's side of a run: ``fit`` starts it, a :class:`Run` handle follows it.

It reaches the coordinator and the ranks only through their handlers
(:mod:`._calls`); the one import of their code is the plugins ``fit`` hands to Dask
to install (the import contracts in ``pyproject.toml`` name it).
"""

from __future__ import annotations

from ft_notebook.train.kernel._fit import fit
from ft_notebook.train.kernel._handle import Run, attach, format_run, runs

__all__ = ["Run", "attach", "fit", "format_run", "runs"]
