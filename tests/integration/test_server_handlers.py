"""The REST handlers through a real jupyter_server (pytest-jupyter's fixtures)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.utils import url_path_join
from tornado.httpclient import HTTPResponse
from tornado.routing import Router

from ft_notebook._notebook_key import notebook_key
from ft_notebook.events import WorkerLost, publish, run_topic
from ft_notebook.server import API_PREFIX, ROUTES
from ft_notebook.server import _handlers as handlers
from ft_notebook.store import CheckpointStore

pytest_plugins = ["pytest_jupyter.jupyter_server"]

Fetch = Callable[..., Awaitable[HTTPResponse]]
NO_TOKEN = {"Authorization": ""}


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"ft_notebook.server": True}}}


@pytest.fixture(autouse=True)
def private_data(isolated_data_dir: Path) -> Path:
    return isolated_data_dir


async def _call(fetch: Fetch, path: str, method: str, **kw: Any) -> HTTPResponse:
    path = path.replace("([^/]+)", "a-service")  # a route's pattern, as a request's path
    if method == "POST" and "predict" in path:  # a well-formed body: it reaches the cluster
        kw.setdefault("body", json.dumps({"inputs": [[0.0]]}))
    elif method == "POST":
        kw.setdefault("body", json.dumps({"cluster": "c", "action": "kill", "worker": "w"}))
    return await fetch(path, method=method, raise_error=False, **kw)


def _registered_patterns(app: Any) -> set[str]:
    """Every URL pattern of the server's routing table that belongs to our API."""
    found = set()

    def walk(router: Any) -> None:
        for rule in getattr(router, "rules", ()):
            if isinstance(rule.target, Router):
                walk(rule.target)
            regex = getattr(rule.matcher, "regex", None)
            if regex is not None and API_PREFIX in regex.pattern:
                found.add(regex.pattern)

    walk(app.default_router)
    walk(app.wildcard_router)
    return found


def test_routes_list_every_handler_and_the_server_registers_exactly_them(
    jp_serverapp: Any, jp_base_url: str
) -> None:
    defined, todo = set(), [handlers._Handler]
    while todo:
        for sub in todo.pop().__subclasses__():
            defined.add(sub)
            todo.append(sub)
    assert {h for _, h, _ in ROUTES} == defined
    assert _registered_patterns(jp_serverapp.web_app) == {
        url_path_join(jp_base_url, path) + "$" for path, _, _ in ROUTES
    }


@pytest.mark.parametrize(("path", "method"), [(p, m) for p, _, ms in ROUTES for m in ms])
async def test_every_route_rejects_an_unauthenticated_request(
    jp_fetch: Fetch, path: str, method: str
) -> None:
    anonymous = await _call(jp_fetch, path, method, headers=NO_TOKEN)
    assert anonymous.code == 403
    assert "application/json" in anonymous.headers["Content-Type"]
    assert json.loads(anonymous.body).get("reason") != "Refused"  # not our handler's answer
    # the same request with the token gets through to the handler
    params = {"topic": "ft-notebook.cluster", "notebook": "nb", "cluster": "none-running"}
    authenticated = await _call(jp_fetch, path, method, params=params)
    if method == "GET":
        assert authenticated.code in (200, 404)
        if authenticated.code == 404:  # the workers of a cluster that does not run
            assert json.loads(authenticated.body)["reason"] == "NotFound"
    elif "predict" in path:  # a service of a cluster that does not run
        assert (authenticated.code, json.loads(authenticated.body)["reason"]) == (404, "NotFound")
    elif "clusters" in path:  # a chaos body is no cluster request; or no such cluster
        assert json.loads(authenticated.body)["reason"] in ("BadRequest", "NotFound")
    else:  # chaos is off by default
        assert json.loads(authenticated.body)["reason"] == "Refused"


async def test_get_routes_answer_json(jp_fetch: Fetch) -> None:
    publish(WorkerLost("cpu0", "tcp://x"), run_topic("alpha"))
    publish(WorkerLost("cpu1", "tcp://y"), run_topic("alpha"))
    clusters = await jp_fetch(API_PREFIX, "clusters")
    assert json.loads(clusters.body) == []
    runs = json.loads((await jp_fetch(API_PREFIX, "runs")).body)
    assert [(r["name"], r["last_seq"]) for r in runs] == [("alpha", 2)]
    events = await jp_fetch(
        API_PREFIX, "events", params={"topic": run_topic("alpha"), "since": "1"}
    )
    assert [e["data"]["name"] for e in json.loads(events.body)] == ["cpu1"]
    snapshots = await jp_fetch(API_PREFIX, "snapshots", params={"notebook": "nb-1"})
    assert json.loads(snapshots.body) == []


async def test_snapshots_of_an_open_notebook_by_its_path(
    jp_fetch: Fetch, jp_serverapp: Any, jp_root_dir: Path, private_data: Path
) -> None:
    """The server finds the snapshots under the key the notebook's kernel uses: the
    one made from the JPY_SESSION_NAME the server gives a kernel for that notebook."""
    (jp_root_dir / "sub").mkdir()
    (jp_root_dir / "sub" / "nb.ipynb").write_text("{}")
    env = jp_serverapp.session_manager.get_kernel_env("sub/nb.ipynb", "nb.ipynb")
    key = notebook_key(env["JPY_SESSION_NAME"])
    with CheckpointStore(private_data / "snapshots", keep=None, publish_events=False) as store:
        store.save(key, 1, {"x": 1}, metadata={"name": "auto", "cell": 2, "variables": ["x"]})
    response = await jp_fetch(API_PREFIX, "snapshots", params={"path": "sub/nb.ipynb"})
    assert [(s["name"], s["cell"]) for s in json.loads(response.body)] == [("auto", 2)]
    other = await jp_fetch(API_PREFIX, "snapshots", params={"path": "nb.ipynb"})
    assert json.loads(other.body) == []


async def test_a_notebook_renamed_in_jupyter_keeps_its_snapshots(
    jp_fetch: Fetch, jp_serverapp: Any, jp_root_dir: Path, private_data: Path
) -> None:
    """Renamed through Jupyter's contents API (as the file browser does), alone or
    with its folder, a notebook's snapshots are listed under its new path; a
    notebook without snapshots leaves no record."""
    import asyncio

    from ft_notebook import _renames

    def key(api_path: str) -> str:
        env = jp_serverapp.session_manager.get_kernel_env(api_path, api_path.split("/")[-1])
        return notebook_key(env["JPY_SESSION_NAME"])

    async def rename(old: str, new: str) -> None:
        body = json.dumps({"path": new})
        await jp_fetch("api", "contents", *old.split("/"), method="PATCH", body=body)

    async def renamed_from(api_path: str, count: int) -> list[str]:
        deadline = asyncio.get_running_loop().time() + 10
        while asyncio.get_running_loop().time() < deadline:
            found = _renames.renamed_from(private_data, key(api_path))
            if len(found) >= count:
                return found
            await asyncio.sleep(0.02)
        return _renames.renamed_from(private_data, key(api_path))

    (jp_root_dir / "sub").mkdir()
    for name in ("draft.ipynb", "plain.ipynb"):
        (jp_root_dir / "sub" / name).write_text("{}")
    draft, plain = key("sub/draft.ipynb"), key("sub/plain.ipynb")
    with CheckpointStore(private_data / "snapshots", keep=None, publish_events=False) as store:
        store.save(draft, 1, {"x": 1}, metadata={"name": "auto", "cell": 3, "variables": ["x"]})
    await rename("sub/plain.ipynb", "sub/plain-2.ipynb")
    await rename("sub/draft.ipynb", "sub/final.ipynb")
    assert await renamed_from("sub/final.ipynb", 1) == [draft]
    final = key("sub/final.ipynb")
    listed = await jp_fetch(API_PREFIX, "snapshots", params={"path": "sub/final.ipynb"})
    rows = json.loads(listed.body)
    assert [(s["name"], s["cell"], s["renamed_from"]) for s in rows] == [("auto", 3, draft)]
    await rename("sub", "moved")  # the folder, and the notebooks in it
    assert await renamed_from("moved/final.ipynb", 2) == [final, draft]
    listed = await jp_fetch(API_PREFIX, "snapshots", params={"path": "moved/final.ipynb"})
    assert [s["renamed_from"] for s in json.loads(listed.body)] == [draft]
    assert _renames.renamed_from(private_data, key("moved/plain-2.ipynb")) == []
    assert plain not in (private_data / _renames.FILE).read_text()


@pytest.mark.parametrize(
    ("route", "params"),
    [
        ("snapshots", {"path": "../outside.ipynb"}),
        ("snapshots", {"path": "a/../../b.ipynb"}),
        ("events", {"topic": "../../etc/passwd"}),
        ("events", {"topic": "ft-notebook.run.a/b"}),
        ("events", {}),
        ("events", {"topic": "ft-notebook.cluster", "since": "-3"}),
        ("snapshots", {"notebook": "../secrets"}),
        ("snapshots", {"notebook": ".hidden"}),
        ("snapshots", {}),
        ("workers", {"cluster": "../x"}),
        ("workers", {}),
    ],
)
async def test_bad_names_and_numbers_get_400_with_a_json_message(
    jp_fetch: Fetch, route: str, params: dict[str, str]
) -> None:
    response = await jp_fetch(API_PREFIX, route, params=params, raise_error=False)
    assert response.code == 400
    body = json.loads(response.body)
    assert body["reason"] == "BadRequest"
    assert body["message"]
    assert "%s" not in body["message"]


async def test_an_unreachable_cluster_is_503_with_a_json_message(
    jp_fetch: Fetch, register_cluster: Callable[..., Any]
) -> None:
    register_cluster("lab")  # this process, so it counts as alive; no certificates
    listed = json.loads((await jp_fetch(API_PREFIX, "clusters")).body)
    assert [c["name"] for c in listed] == ["lab"]
    response = await jp_fetch(API_PREFIX, "workers", params={"cluster": "lab"}, raise_error=False)
    assert response.code == 503
    body = json.loads(response.body)
    assert body["reason"] == "Unavailable"
    assert "certificates" in body["message"]


async def test_chaos_is_refused_by_default(jp_fetch: Fetch) -> None:
    response = await _call(jp_fetch, f"{API_PREFIX}/chaos", "POST")
    assert response.code == 403
    body = json.loads(response.body)
    assert body["reason"] == "Refused"
    assert "ft-notebook.server.chaos-actions" in body["message"]


async def test_chaos_body_that_is_not_json_is_400(jp_fetch: Fetch) -> None:
    response = await _call(jp_fetch, f"{API_PREFIX}/chaos", "POST", body="{not json")
    assert response.code == 400


async def test_a_cookie_authenticated_post_needs_xsrf(jp_fetch: Fetch) -> None:
    # A token-authenticated request makes the server set its login cookie.
    first = await jp_fetch(API_PREFIX, "clusters")
    cookies = SimpleCookie()
    for header in first.headers.get_list("Set-Cookie"):
        cookies.load(header)
    [login] = [v for k, v in cookies.items() if k.startswith("username-")]
    by_cookie = {"Authorization": "", "Cookie": f"{login.key}={login.value}"}

    # the cookie alone authenticates a GET ...
    assert (await jp_fetch(API_PREFIX, "runs", headers=by_cookie)).code == 200
    # ... but a POST without the XSRF token is refused before the handler runs
    for route in ("chaos", "services/a-service/predict"):
        forged = await _call(jp_fetch, f"{API_PREFIX}/{route}", "POST", headers=dict(by_cookie))
        assert forged.code == 403
        assert "_xsrf" in json.loads(forged.body)["message"]
    # with a token in the header that matches the _xsrf cookie (which a page of another
    # origin can neither read nor set), the request reaches the handler, which refuses
    # chaos for its own reason
    token = "0123456789abcdef"
    xsrf = {"Cookie": f"{by_cookie['Cookie']}; _xsrf={token}", "X-XSRFToken": token}
    reached = await _call(jp_fetch, f"{API_PREFIX}/chaos", "POST", headers={**by_cookie, **xsrf})
    assert reached.code == 403
    assert json.loads(reached.body)["reason"] == "Refused"


@pytest.mark.slow
async def test_a_service_answers_json_over_http_as_it_answers_a_notebook(
    jp_fetch: Fetch, jp_serverapp: Any, cluster: Any, register_cluster: Callable[..., Any]
) -> None:
    import asyncio

    import torch
    from distributed import Client

    import ft_notebook as ft
    from ft_notebook.server import ResilienceManager
    from ft_notebook.testing.serving import inputs, small_mlp

    lab = register_cluster("lab").name
    client = await asyncio.to_thread(Client, cluster, set_as_default=False)
    manager = ResilienceManager(connect=lambda info: client)
    jp_serverapp.web_app.settings["ft_notebook_manager"] = manager
    svc = await asyncio.to_thread(
        ft.serve, small_mlp, 2, None, "http-mlp", client, example=torch.zeros(1, 32)
    )
    try:

        async def post(service: str, body: Any) -> HTTPResponse:
            return await jp_fetch(
                API_PREFIX,
                "services",
                service,
                "predict",
                method="POST",
                params={"cluster": lab},
                body=json.dumps(body),
                raise_error=False,
            )

        x = inputs(1)[0]
        answer = await post("http-mlp", {"inputs": x.tolist()})
        assert answer.code == 200, answer.body
        got = json.loads(answer.body)
        with torch.inference_mode():
            want = small_mlp()(x)
        torch.testing.assert_close(torch.tensor(got["outputs"]), want, rtol=1e-5, atol=1e-5)
        assert got["tier"] == "HEALTHY"
        assert got["replica"] in ("http-mlp/0", "http-mlp/1")
        listed = await jp_fetch(API_PREFIX, "services", params={"cluster": lab})
        [row] = json.loads(listed.body)
        assert (row["name"], row["health"], row["ready"]) == ("http-mlp", "HEALTHY", 2)
        wrong_shape = await post("http-mlp", {"inputs": [[1.0, 2.0]]})
        assert wrong_shape.code == 400
        assert "mat1 and mat2" in json.loads(wrong_shape.body)["message"]
        for bad in ({"inputs": [[1, 2], [3]]}, {"pickle": "gASV"}, [1, 2]):
            refused = await post("http-mlp", bad)
            assert refused.code == 400, bad
        missing = await post("no-such-service", {"inputs": [[0.0] * 32]})
        assert (missing.code, json.loads(missing.body)["reason"]) == (404, "NotFound")
    finally:
        await asyncio.to_thread(svc.close)
        await asyncio.to_thread(manager.close)
        await asyncio.to_thread(client.close)
