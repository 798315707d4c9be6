"""Test helpers for ft_notebook and for projects that use it.

The pytest plugin (:mod:`ft_notebook.testing.plugin`) is registered automatically;
these are the pieces it is made of, for use outside pytest too.
"""

from __future__ import annotations

from ft_notebook.testing._clusters import private_cluster, training_cluster
from ft_notebook.testing._hashes import NAMESPACE_HASHES, parse_hashes
from ft_notebook.testing._kernel import ExecResult, KernelSession
from ft_notebook.testing._poll import PollTimeout, poll_for

__all__ = [
    "NAMESPACE_HASHES",
    "ExecResult",
    "KernelSession",
    "PollTimeout",
    "parse_hashes",
    "poll_for",
    "private_cluster",
    "training_cluster",
]
