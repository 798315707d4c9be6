"""The predict route through a real jupyter_server: every malformed or oversized body is
a 4xx with a JSON message, decided before any cluster is asked (the cluster named
here does not run, so a body that got past the checks would be a 404), and a large
body is parsed without holding up the server's event loop (issue 36, item 6)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import pytest
from test_server_handlers import Fetch, jp_server_config, private_data  # noqa: F401

from ft_notebook.server import API_PREFIX
from ft_notebook.server import _services as services

pytest_plugins = ["pytest_jupyter.jupyter_server"]


async def _predict(fetch: Fetch, body: bytes | str) -> Any:
    return await fetch(
        API_PREFIX,
        "services",
        "mlp",
        "predict",
        method="POST",
        params={"cluster": "none-running"},
        body=body,
        raise_error=False,
    )


BAD_BODIES = {
    "NaN input": ('{"inputs": [[1.0, NaN]]}', r"NaN is not a number"),
    "1e999 input": ('{"inputs": [[1e999]]}', r"1e999 is out of a float's range"),
    "-Infinity in json": ('{"json": {"x": -Infinity}}', r"-Infinity is not a number"),
    "100,000 nested [": ("[" * 100_000, r"nests .* too deeply"),
    "2,000 nested [": ("[" * 2_000 + "]" * 2_000, r"nests .* too deeply"),
    "not JSON": ('{"inputs": [[1, 2]', r"not JSON"),
    "not UTF-8": (b'{"json": "\xff"}', r"not JSON"),
    "neither inputs nor json": ('{"pickle": "gASV"}', r'"inputs" .* or "json"'),
    "both": ('{"inputs": [[1]], "json": 1}', r'"inputs" .* or "json"'),
}


@pytest.mark.parametrize("case", list(BAD_BODIES))
async def test_a_malformed_body_is_400_before_any_cluster_is_asked(
    jp_fetch: Fetch, case: str
) -> None:
    body, message = BAD_BODIES[case]
    response = await _predict(jp_fetch, body)
    assert response.code == 400, response.body[:300]
    answer = json.loads(response.body)
    assert answer["reason"] == "BadRequest"
    assert re.search(message, answer["message"]), answer["message"]


@pytest.mark.parametrize(
    ("case", "cap"),
    [("inputs", services.MAX_BODY_BYTES), ("json", services.MAX_JSON_BYTES)],
)
async def test_a_body_over_its_cap_is_413(jp_fetch: Fetch, case: str, cap: int) -> None:
    if case == "inputs":
        body = '{"inputs": [[' + ",".join(["0"] * (cap // 2 + 1)) + "]]}"
    else:
        body = json.dumps({"json": "x" * (cap + 1)})
    response = await _predict(jp_fetch, body)
    assert response.code == 413, response.body[:300]
    answer = json.loads(response.body)
    assert answer["reason"] == "TooLarge"
    assert f"at most {cap}" in answer["message"]


async def test_a_large_body_is_parsed_off_the_event_loop(jp_fetch: Fetch) -> None:
    """The server runs on this test's event loop: a ticker on it measures the longest
    time the loop was held while a large, valid body was parsed (then refused: its
    cluster does not run), against the time that parse takes when it holds the loop."""
    row = ",".join(f"{i * 0.37:.6f}" for i in range(1000))
    body = '{"inputs": [' + ",".join(f"[{row}]" for _ in range(2500)) + "]}"
    assert len(body) < services.MAX_BODY_BYTES
    started = time.perf_counter()
    services.parse_body(body.encode())  # the server's parse, as it would hold the loop
    held_s = time.perf_counter() - started

    gaps: list[float] = []

    async def tick() -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.002)
            gaps.append(time.perf_counter() - before)

    ticker = asyncio.create_task(tick())
    try:
        response = await _predict(jp_fetch, body)
    finally:
        ticker.cancel()
    assert response.code == 404, response.body[:300]  # it got past every check
    # held on the loop, the parse would stop the ticker for about held_s. Off it, the
    # loop shares the GIL with the parsing thread (its number hooks are Python) and
    # ticks on; under make test's load gaps of 0.21 and 0.26 s were seen against 0.32
    # and 0.34 s of a plain json.loads (the process not scheduled), which the server's
    # parse takes about 1.8 times as long as: the bound is most of the server's parse,
    # and the loop must have ticked on.
    assert max(gaps) < held_s * 0.75, (max(gaps), held_s)
    assert len(gaps) >= 5, gaps
