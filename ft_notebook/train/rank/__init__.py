"""The worker side of a run: one rank actor per worker and run, and what it trains by.

Its only entry points are the handlers :class:`RankHandlers` registers (see
:mod:`ft_notebook.train.protocol`); it imports neither the kernel's nor the
coordinator's code (the import contracts in ``pyproject.toml``).
"""

from __future__ import annotations

from ft_notebook.train.rank._plugin import RankHandlers

__all__ = ["RankHandlers"]
