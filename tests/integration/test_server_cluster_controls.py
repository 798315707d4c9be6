"""The panel's cluster controls, the proxied Dask dashboard and a kernel's memory,
through a real jupyter_server with jupyter-server-proxy, on a real private cluster:
processes are checked, not only answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import pytest
from tornado.httpclient import HTTPResponse

from ft_notebook.cluster import clusters, down
from ft_notebook.server import API_PREFIX
from ft_notebook.testing import poll_for

pytest_plugins = ["pytest_jupyter.jupyter_server"]

Fetch = Callable[..., Awaitable[HTTPResponse]]
NO_TOKEN = {"Authorization": ""}
CONTROL_ROUTES = ("clusters", "clusters/c/scale", "clusters/c/stop")


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"ft_notebook.server": True, "jupyter_server_proxy": True}
        }
    }


@pytest.fixture(autouse=True)
def private_data(isolated_data_dir: Path) -> Iterator[Path]:
    """A data folder of this test; clusters start with a dashboard on a free port."""
    import dask.config

    from ft_notebook.config import reload_config

    with dask.config.set({"ft-notebook.cluster.dashboard-port": 0}):
        reload_config()
        yield isolated_data_dir
        for info in clusters():  # a failed test leaves no cluster running
            down(info.name)
    reload_config()


async def _post(fetch: Fetch, route: str, body: object = None, **kw: Any) -> HTTPResponse:
    return await fetch(
        API_PREFIX,
        route,
        method="POST",
        body=json.dumps({} if body is None else body),
        raise_error=False,
        **kw,
    )


def _json(response: HTTPResponse) -> Any:
    return json.loads(response.body)


async def test_cluster_controls_refuse_a_cookie_post_without_xsrf_and_anonymous_ones(
    jp_fetch: Fetch,
) -> None:
    first = await jp_fetch(API_PREFIX, "clusters")
    cookies = SimpleCookie()
    for header in first.headers.get_list("Set-Cookie"):
        cookies.load(header)
    [login] = [v for k, v in cookies.items() if k.startswith("username-")]
    by_cookie = {"Authorization": "", "Cookie": f"{login.key}={login.value}"}
    for route in CONTROL_ROUTES:
        forged = await _post(jp_fetch, route, {"name": "c", "workers": 1}, headers=by_cookie)
        assert forged.code == 403, route
        assert "_xsrf" in _json(forged)["message"]
        anonymous = await _post(jp_fetch, route, {"name": "c", "workers": 1}, headers=NO_TOKEN)
        assert anonymous.code == 403, route
    # with the XSRF token the request reaches the handler (which finds no cluster c)
    token = "0123456789abcdef"
    xsrf = {"Cookie": f"{by_cookie['Cookie']}; _xsrf={token}", "X-XSRFToken": token}
    reached = await _post(jp_fetch, "clusters/c/stop", headers={**by_cookie, **xsrf})
    assert (reached.code, _json(reached)["reason"]) == (404, "NotFound")
    assert clusters() == []


async def test_bad_requests_get_a_4xx_json_that_says_what_to_do(jp_fetch: Fetch) -> None:
    cases = [
        ("clusters", {"name": "../x", "workers": 1}, 400, "cluster name"),
        ("clusters", {"name": "c", "workers": 0}, 400, "whole number from 1"),
        ("clusters", ["c"], 400, "JSON object"),
        ("clusters/c/scale", {"workers": "many"}, 400, "whole number from 1"),
        ("clusters/c/scale", {"workers": 2}, 404, "No cluster named 'c'"),
        ("clusters/..%2Fetc/stop", None, 400, "cluster name"),
    ]
    for route, body, code, words in cases:
        answer = await _post(jp_fetch, route, body)
        assert answer.code == code, (route, answer.body)
        assert words in _json(answer)["message"], (route, answer.body)
    not_json = await jp_fetch(API_PREFIX, "clusters", method="POST", body="{", raise_error=False)
    assert (not_json.code, _json(not_json)["reason"]) == (400, "BadRequest")
    assert clusters() == []


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


@pytest.mark.slow
async def test_start_scale_proxied_dashboard_and_stop_a_private_cluster(
    jp_fetch: Fetch, jp_base_url: str
) -> None:
    started = await _post(jp_fetch, "clusters", {"name": "lab", "workers": 1})
    assert started.code == 201, started.body
    model = _json(started)
    assert (model["name"], len(model["workers"])) == ("lab", 1)
    [info] = clusters()
    assert info.pid == model["pid"]
    assert psutil.Process(info.pid).is_running()

    again = await _post(jp_fetch, "clusters", {"name": "lab", "workers": 1})
    assert (again.code, _json(again)["reason"]) == (409, "Conflict")
    assert "scale it" in _json(again)["message"]

    scaled = _json(await _post(jp_fetch, "clusters/lab/scale", {"workers": 2}))
    assert sorted(scaled["workers"]) == ["cpu0", "cpu1"]
    workers = _json(await jp_fetch(API_PREFIX, "workers", params={"cluster": "lab"}))
    assert sorted((w["name"], w["state"]) for w in workers) == [
        ("cpu0", "running"),
        ("cpu1", "running"),
    ]
    # the added worker is a child of the cluster's process, so stopping it ends it too
    children = {p.pid for p in psutil.Process(info.pid).children(recursive=True)}
    assert set(scaled["workers"].values()) <= children

    down_to_one = _json(await _post(jp_fetch, "clusters/lab/scale", {"workers": 1}))
    assert list(down_to_one["workers"]) == ["cpu0"]
    retired = scaled["workers"]["cpu1"]
    await asyncio.to_thread(
        poll_for, lambda: not _alive([retired]), timeout=30, what="the retired worker exiting"
    )
    workers = _json(await jp_fetch(API_PREFIX, "workers", params={"cluster": "lab"}))
    assert [(w["name"], w["state"]) for w in workers] == [("cpu0", "running")]  # no "lost"

    # the dashboard through the Jupyter server, behind its login
    dashboard = urlsplit(model["dashboard"])
    assert dashboard.hostname == "127.0.0.1"
    page = await jp_fetch("proxy", str(dashboard.port), "status", raise_error=False)
    assert page.code == 200
    html = page.body.decode()
    assert "Dask" in html
    assert "bokeh" in html.lower()
    anonymous = await jp_fetch(
        "proxy",
        str(dashboard.port),
        "status",
        headers=NO_TOKEN,
        raise_error=False,
        follow_redirects=False,
    )
    assert anonymous.code in (302, 403)
    assert "bokeh" not in anonymous.body.decode().lower()

    pids = [info.pid, *down_to_one["workers"].values()]
    stopped = await _post(jp_fetch, "clusters/lab/stop")
    assert stopped.code == 200, stopped.body
    assert _json(stopped)["name"] == "lab"
    assert sorted(_json(stopped)["pids"]) == sorted(pids)
    assert _alive(pids) == []
    assert clusters() == []
    assert _json(await jp_fetch(API_PREFIX, "clusters")) == []
    gone = await _post(jp_fetch, "clusters/lab/stop")
    assert gone.code == 404


async def test_kernel_usage_is_the_memory_of_that_kernels_process(jp_fetch: Fetch) -> None:
    kernel = _json(await jp_fetch("api", "kernels", method="POST", body="{}"))
    try:
        usage = _json(await jp_fetch(API_PREFIX, "kernels", kernel["id"], "usage"))
        process = psutil.Process(usage["pid"])
        # the process the server started for this kernel: its connection file names it
        assert any(kernel["id"] in arg for arg in process.cmdline())
        assert usage["rss"] == pytest.approx(process.memory_info().rss, rel=0.2)
        anonymous = await jp_fetch(
            API_PREFIX, "kernels", kernel["id"], "usage", headers=NO_TOKEN, raise_error=False
        )
        assert anonymous.code == 403
    finally:
        await jp_fetch("api", "kernels", kernel["id"], method="DELETE")
    missing = await jp_fetch(API_PREFIX, "kernels", kernel["id"], "usage", raise_error=False)
    assert (missing.code, _json(missing)["reason"]) == (404, "NotFound")
