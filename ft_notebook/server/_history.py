"""REST handlers of runs' and services' histories, the plots of the lab's dashboards.

``GET runs/RUN/history`` and ``GET services/SERVICE/history?cluster=NAME`` answer a
:class:`~._models.RunHistoryModel` or :class:`~._models.ServiceHistoryModel`: the
same fold as ``runs`` and ``services`` with its bounded history. The name in the path
is checked as a run's or service's name (400 otherwise) before it names a journal.
"""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ft_notebook.server._handlers import _Handler


class RunHistoryHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self, run: str) -> None:
        history = await self.call(self.manager.run_history, run)
        self.reply(history.to_json())


class ServiceHistoryHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self, service: str) -> None:
        cluster = self.get_query_argument("cluster", "default")
        history = await self.call(self.manager.service_history, cluster, service)
        self.reply(history.to_json())
