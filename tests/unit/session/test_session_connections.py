"""A Dask client in the namespace is a live connection: said once, with how to
reconnect, not "NOT protected ... cannot pickle '_asyncio.Task'" at every save
(issue 38)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _session_notebook import Notebook


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address="127.0.0.1:0") as lc,
        Client(lc, set_as_default=False) as client,
    ):
        yield client


def test_a_dask_client_is_reported_once_as_a_live_connection(
    tmp_path: Path, dask_client: Any
) -> None:
    nb = Notebook(tmp_path)
    nb.ns["client"] = dask_client
    nb.run("x = 1", snapshot=False)
    first = nb.session.snapshot(nb.ns, nb.count)
    why = first.unprotected["client"]
    assert why.startswith(
        f"a live connection to the Dask scheduler at {dask_client.scheduler.address}"
    )
    assert "reconnect with `client = ft.cluster()`" in why
    assert "_asyncio" not in why
    nb.run("y = 2", snapshot=False)
    assert "client" not in nb.session.snapshot(nb.ns, nb.count).unprotected
    nb.ns["client"] = dask_client  # the same connection under a new name is said again
    nb.ns["other"] = dask_client
    assert set(nb.session.snapshot(nb.ns, nb.count).unprotected) == {"other"}
    ns, report = nb.crash_and_restore()
    assert report.lost["client"].startswith("a live connection to the Dask scheduler")
    assert ns["x"] == 1
