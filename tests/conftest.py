"""Suite-wide settings; the fixtures come from ft_notebook's own pytest plugin."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from _schedule import LongestFirst, cost

from ft_notebook.cluster._certs import CertPaths
from ft_notebook.cluster._registry import ClusterInfo, Registry

pytest_plugins = ["pytester"]

_KIND_BY_FOLDER = {
    "unit": "unit",
    "integration": "integration",
    "chaos": "chaos",
    "browser": "browser",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the folder it lives in, so `-m unit` etc. select by kind; put
    the long files first (a stable sort: a file's own tests keep their order)."""
    here = Path(__file__).parent
    for item in items:
        folder = Path(item.path).relative_to(here).parts[0]
        kind = _KIND_BY_FOLDER.get(folder)
        if kind is not None:
            item.add_marker(kind)
    items.sort(key=lambda item: -cost(Path(item.path).relative_to(here).as_posix()).seconds)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LongestFirst | None:
    """Under ``--dist loadfile``, the long files first, two busy ones at most at once
    (``_schedule.py`` says why)."""
    return LongestFirst(config, log) if config.getvalue("dist") == "loadfile" else None


@pytest.fixture
def register_cluster(isolated_data_dir: Path) -> Callable[..., ClusterInfo]:
    """Write a registry entry that names a live process (by default this test process:
    ours, never signalled) but whose certificates do not exist, so connecting fails."""

    def register(name: str = "lab", pid: int | None = None, **fields: Any) -> ClusterInfo:
        folder = isolated_data_dir
        pid = os.getpid() if pid is None else pid
        info = ClusterInfo(
            name=name,
            address="tls://127.0.0.1:1",
            pid=pid,
            pid_started=psutil.Process(pid).create_time() if psutil.pid_exists(pid) else 0.0,
            started=fields.pop("started", 1234.5),
            owner_uid=os.getuid(),
            certs=CertPaths(folder / "no-ca.pem", folder / "no-cert.pem", folder / "no-key.pem"),
            log=str(folder / "cluster.log"),
            **fields,
        )
        Registry.at(folder).write(info)
        return info

    return register
