"""The suite's own clusters never ask for Dask's default dashboard port."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_no_cluster_of_the_suite_asks_for_the_default_dashboard_port() -> None:
    """``LocalCluster(dashboard_address=None)`` means Dask's default, port 8787, not no
    dashboard: when a cluster of another test (a demo's, a notebook's own) holds that
    port, Dask warns that it hosts the dashboard elsewhere, and under the suite's
    warnings-as-errors the cluster fails to start (two errors in a make test run whose
    order put them side by side). Ask for any free port: ``"127.0.0.1:0"``."""
    asking = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("tests", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != Path(__file__)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"(?<!worker_)dashboard_address=None", line)
    ]
    assert asking == [], asking
