"""Workers that a nanny restarts import torch before they register again.

On a cluster ft_notebook did not start (a plain ``LocalCluster``, ``dask worker``),
a worker that comes back after a crash imports torch when its rank unpickles the
run: seconds during which the run cannot admit it (about 5 s of the 6 s from a
restarted worker's arrival to its first step, measured here), and during which its
event loop stalls. This nanny plugin adds ft_notebook's worker preload
(:mod:`._preload`) to the nanny's own, so every worker it starts from now on imports
torch first. Workers already running are left alone (no restart).
"""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import NannyPlugin

PRELOAD = "ft_notebook.cluster._preload"


class PreloadOnRestart(NannyPlugin):
    name = "ft-notebook-preload-on-restart"
    restart = False

    def setup(self, nanny: Any) -> None:
        preload = list(nanny.preload or [])
        if isinstance(nanny.preload, str):
            preload = [nanny.preload]
        if PRELOAD in preload:
            return
        argv = list(nanny.preload_argv or [])
        if argv and not isinstance(argv[0], str):  # one argument list per preload
            argv.append([])
        nanny.preload, nanny.preload_argv = [*preload, PRELOAD], argv
        # a nanny restarts its worker with the arguments of the first start
        process = getattr(nanny, "process", None)
        kwargs = getattr(process, "worker_kwargs", None)
        if isinstance(kwargs, dict):
            kwargs.update(preload=nanny.preload, preload_argv=nanny.preload_argv)
