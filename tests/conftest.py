"""Suite-wide settings; the fixtures come from ft_notebook's own pytest plugin."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from ft_notebook.cluster._certs import CertPaths
from ft_notebook.cluster._registry import ClusterInfo, Registry

pytest_plugins = ["pytester"]

_KIND_BY_FOLDER = {
    "unit": "unit",
    "integration": "integration",
    "chaos": "chaos",
    "browser": "browser",
}


#: Files that take half a minute or more (kills and recoveries, demos played at a
#: person's pace, browsers), longest first as a fresh clone's make test measured them
#: (a prefix holds for every file it starts). pytest collects them first. Under
#: pytest-xdist make test keeps xdist's own order (the files with the most tests first,
#: these last): with --no-loadscope-reorder these went first and a fresh clone's make
#: test took 721 and 711 s instead of 770 s, but the long files ran all at once and
#: each of those two runs had tests fail from the load (a breaker opened on a health
#: check; a survivor taken for hung and evicted, preloads importing for 8 s).
_LONG_FIRST = (
    "integration/test_demo_02",  # paced 106 s, restart 92 s
    "integration/test_demo_04",  # 87 + 35 s
    "integration/test_demo_03",  # 71 + 42 s
    "chaos/test_train_drills_cases",
    "chaos/test_train_drills",
    "browser/test_labextension_browser",
    "integration/test_own_cluster",
    "integration/test_wheel",
    "integration/test_train_runs",
    "chaos/",
    "browser/",
    "integration/test_demo",  # demo 01, Run All
    "integration/test_snapshot_zoo",
    "integration/test_readme",
    "security/test_listeners",
    "integration/test_fit_progress",
    "integration/test_dashboard_notebook",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the folder it lives in, so `-m unit` etc. select by kind; put
    the long files first (a stable sort: a file's own tests keep their order)."""
    here = Path(__file__).parent
    for item in items:
        folder = Path(item.path).relative_to(here).parts[0]
        kind = _KIND_BY_FOLDER.get(folder)
        if kind is not None:
            item.add_marker(kind)
    items.sort(key=lambda item: _rank(Path(item.path).relative_to(here).as_posix()))


def _rank(path: str) -> int:
    return next((i for i, p in enumerate(_LONG_FIRST) if path.startswith(p)), len(_LONG_FIRST))


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
