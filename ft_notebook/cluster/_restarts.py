"""Workers that a nanny restarts import torch before they register again.

On a cluster ft_notebook did not start (a plain ``LocalCluster``, ``dask worker``),
a worker that comes back after a crash imports torch when its rank unpickles the
run: seconds during which the run cannot admit it (about 5 s of the 6 s from a
restarted worker's arrival to its first step, measured here), and during which its
event loop stalls. This nanny plugin adds ft_notebook's worker preload
(:mod:`._preload`) to the nanny's own, so every worker it starts from now on imports
torch first. It adds :mod:`._preload_restart` to every nanny, ours too, so a
restarted worker has also done the imports a rank would make (``torch._dynamo``)
before it registers. Workers already running are left alone (no restart).
"""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import NannyPlugin

PRELOAD = "ft_notebook.cluster._preload"
RESTART_PRELOAD = "ft_notebook.cluster._preload_restart"


class PreloadOnRestart(NannyPlugin):
    name = "ft-notebook-preload-on-restart"
    restart = False

    def setup(self, nanny: Any) -> None:
        preload = list(nanny.preload or [])
        if isinstance(nanny.preload, str):
            preload = [nanny.preload]
        missing = [p for p in (PRELOAD, RESTART_PRELOAD) if p not in preload]
        if not missing:
            return
        argv = list(nanny.preload_argv or [])
        if argv and not isinstance(argv[0], str):  # one argument list per preload
            argv.extend([] for _ in missing)
        nanny.preload, nanny.preload_argv = [*preload, *missing], argv
        # a nanny restarts its worker with the arguments of the first start
        process = getattr(nanny, "process", None)
        kwargs = getattr(process, "worker_kwargs", None)
        if isinstance(kwargs, dict):
            kwargs.update(preload=nanny.preload, preload_argv=nanny.preload_argv)
