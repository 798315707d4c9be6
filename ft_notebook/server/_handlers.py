"""Thin REST handlers over :class:`~ft_notebook.server._manager.ResilienceManager`.

Every handler is a jupyter_server ``APIHandler``: ``@web.authenticated`` turns away a
request without a user (403 for an API), ``@authorized`` asks the server's authorizer
for the ``ft_notebook`` resource, and ``APIHandler`` checks XSRF on every POST that
was authenticated by cookie. An :class:`~._manager.ApiError` becomes its status code
with a JSON body ``{"message", "reason"}``; so does anything unexpected (as a 500).
The manager's work (files, a cluster connection) runs in a thread, off the server's
event loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from ft_notebook._notebook_key import notebook_key
from ft_notebook.exceptions import ClusterUnreachable, UnsafeName
from ft_notebook.server._cluster_controls import ClusterControls, kernel_usage
from ft_notebook.server._manager import MAX_EVENTS, ApiError, ResilienceManager
from ft_notebook.server._models import ErrorModel
from ft_notebook.server._renames import kernel_file_path
from ft_notebook.server._services import TooLarge, check_request, parse_body

#: The resource name the server's authorizer sees for every route of this extension.
AUTH_RESOURCE = "ft_notebook"
T = TypeVar("T")


class _Handler(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def manager(self) -> ResilienceManager:
        manager: ResilienceManager = self.settings["ft_notebook_manager"]
        return manager

    @property
    def controls(self) -> ClusterControls:
        controls: ClusterControls = self.settings["ft_notebook_controls"]
        return controls

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in a thread; map what it raises to a status and JSON body."""
        try:
            return await asyncio.to_thread(fn, *args)
        except ApiError as e:
            raise web.HTTPError(e.status, "%s", e, reason=type(e).__name__) from e
        except UnsafeName as e:
            raise web.HTTPError(400, "%s", e, reason="BadRequest") from e
        except ClusterUnreachable as e:
            raise web.HTTPError(503, "%s", e, reason="Unavailable") from e

    def reply(self, body: object) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body, allow_nan=False))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        if exc_info and isinstance(exc_info[1], web.HTTPError) and exc_info[1].args:
            # APIHandler would show only the format string of our "%s" messages
            error = exc_info[1]
            message = (error.log_message or "") % error.args
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(ErrorModel(message, error.reason or "").to_json()))
            return
        super().write_error(status_code, **kwargs)


class ClustersHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        clusters = await self.call(self.manager.clusters)
        self.reply([c.to_json() for c in clusters])

    @web.authenticated
    @authorized
    async def post(self) -> None:
        """``{"name", "workers"}``: start that private cluster (seconds, in a thread)."""
        started = await self.call(self.controls.start, _json_body(self))
        self.set_status(201)
        self.reply(started.to_json())


class ClusterScaleHandler(_Handler):
    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        """``{"workers": N}``: grow or shrink the running cluster ``name`` in place."""
        scaled = await self.call(self.controls.scale, name, _json_body(self))
        self.reply(scaled.to_json())


class ClusterStopHandler(_Handler):
    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        """Stop the cluster ``name``; its processes have exited when this answers."""
        stopped = await self.call(self.controls.stop, name)
        self.reply(stopped.to_json())


class KernelUsageHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self, kernel_id: str) -> None:
        """The resident memory of this server's kernel ``kernel_id``."""
        usage = await self.call(kernel_usage, self.kernel_manager, kernel_id)
        self.reply(usage.to_json())


class WorkersHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        cluster = self.get_query_argument("cluster", "")
        workers = await self.call(self.manager.workers, cluster)
        self.reply([asdict(w) for w in workers])


class RunsHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        runs = await self.call(self.manager.runs)
        self.reply([r.to_json() for r in runs])


class EventsHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        topic = self.get_query_argument("topic", "")
        since = self.get_query_argument("since", "0")
        limit = self.get_query_argument("limit", str(MAX_EVENTS))
        self.reply(await self.call(self.manager.events, topic, since, limit))


class SnapshotsHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        """``?notebook=KEY``, or ``?path=API_PATH`` of an open notebook: the key is made
        from the file path its kernel sees, as the kernel makes it."""
        path = self.get_query_argument("path", "")
        if path:
            key = notebook_key(self._kernel_file_path(path))
        else:
            key = self.get_query_argument("notebook", "")
        snapshots = await self.call(self.manager.snapshots, key)
        self.reply([s.to_json() for s in snapshots])

    def _kernel_file_path(self, api_path: str) -> str:
        try:
            return kernel_file_path(self.kernel_manager, api_path)
        except ValueError as e:
            raise web.HTTPError(400, "%s", str(e), reason="BadRequest") from None


class ServicesHandler(_Handler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        cluster = self.get_query_argument("cluster", "")
        services = await self.call(self.manager.services, cluster)
        self.reply([s.to_json() for s in services])


class PredictHandler(_Handler):
    @web.authenticated
    @authorized
    async def post(self, service: str) -> None:
        """``?cluster=NAME`` (default: ``default``); the body is JSON (see ._services),
        checked before any cluster is asked: 413 over a cap, 400 if malformed."""
        cluster = self.get_query_argument("cluster", "default")
        body = await _request_body(self)
        answer = await self.call(self.manager.predict, cluster, service, body)
        self.reply(answer.to_json())


#: Bodies from this size on are parsed in a thread, off the server's event loop.
PARSE_IN_THREAD_FROM = 64 << 10


async def _request_body(handler: _Handler) -> object:
    raw = handler.request.body or b"{}"
    try:
        if len(raw) < PARSE_IN_THREAD_FROM:
            body = parse_body(raw)
        else:
            body = await asyncio.to_thread(parse_body, raw)
        check_request(body, len(raw))
    except TooLarge as e:
        raise web.HTTPError(413, "%s", str(e), reason="TooLarge") from e
    except ValueError as e:
        raise web.HTTPError(400, "%s", str(e), reason="BadRequest") from e
    return body


def _json_body(handler: _Handler) -> object:
    try:
        return json.loads(handler.request.body or b"{}")
    except (ValueError, RecursionError) as e:
        raise web.HTTPError(400, "%s", f"The body is not JSON: {e}.", reason="BadRequest") from e


class ChaosHandler(_Handler):
    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = _json_body(self)
        if not isinstance(body, dict):
            raise web.HTTPError(
                400,
                "%s",
                'The body must be an object {"cluster", "action", "worker"}.',
                reason="BadRequest",
            )
        done = await self.call(
            self.manager.chaos, body.get("cluster"), body.get("action"), body.get("worker")
        )
        self.reply(done.to_json())
