"""The scheduler side of a run: the coordinator that drives every run of a cluster.

Kernels reach it through the scheduler handler it registers, ranks through their
reports (see :mod:`ft_notebook.train.protocol`); it reaches ranks through their
worker handlers. It imports neither the kernel's nor the ranks' code (the import
contracts in ``pyproject.toml``), so a scheduler never loads torch for it.
"""

from __future__ import annotations

from ft_notebook.train.coordinator._plugin import PLUGIN_NAME, RunCoordinator

__all__ = ["PLUGIN_NAME", "RunCoordinator"]
