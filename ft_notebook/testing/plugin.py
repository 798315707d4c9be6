"""pytest plugin: isolated data, real clusters and kernels, and no leaked processes.

Registered through the ``pytest11`` entry point, so any test suite of a project that
installs ft_notebook gets it. For the whole session it

- points ``ft-notebook.data-dir`` (and Jupyter's runtime folder) at a temporary
  folder, so tests never touch the user's real registry, journals or store (under
  pytest-xdist, one folder per worker, so tests side by side do not see each other's);
- marks the session's processes, and at the end kills every one still alive and
  reports it (ini ``ft_notebook_leaked_processes = fail`` makes that fail the run).

Fixtures: ``ft_data_dir``, ``isolated_data_dir`` (one test's own), ``unique_name``,
``cluster`` (a real ``LocalCluster`` of worker processes with nannies and short
heartbeats, shared per module), ``client``, ``kernel`` (a real IPython kernel through
jupyter_client).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ft_notebook.testing import _processes
from ft_notebook.testing._kernel import KernelSession

_DATA_DIR_ENV = "DASK_FT_NOTEBOOK__DATA_DIR"
_state: dict[str, Any] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "ft_notebook_leaked_processes",
        "What a process left alive at the end of the session does: 'fail' the run "
        "or 'warn' (it is killed either way).",
        default="warn",
    )


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its controller did the rest
        _own_folders(str(config.workerinput["workerid"]))
        return
    root = Path(tempfile.mkdtemp(prefix="ft-notebook-tests-"))
    os.chmod(root, 0o700)
    _state.update(root=root, token=_processes.mark_session())
    os.environ[_DATA_DIR_ENV] = str(root / "data")
    os.environ["JUPYTER_RUNTIME_DIR"] = str(root / "jupyter-runtime")
    _refresh_config()


def _own_folders(worker: str) -> None:
    """A pytest-xdist worker's own data and Jupyter runtime folders, under the session's
    root: tests run side by side must not see each other's clusters, runs and
    checkpoints (a lab server lists every cluster of its data folder)."""
    root = Path(os.environ[_DATA_DIR_ENV]).parent
    os.environ[_DATA_DIR_ENV] = str(root / f"data-{worker}")
    os.environ["JUPYTER_RUNTIME_DIR"] = str(root / f"jupyter-runtime-{worker}")
    _refresh_config()


def _refresh_config() -> None:
    if "dask.config" in sys.modules:  # imported by another plugin before us
        import dask.config

        dask.config.refresh()
    if "ft_notebook.config" in sys.modules:
        from ft_notebook.config import reload_config

        reload_config()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    token = _state.get("token")
    if token is None:
        return
    _close_shared_clusters()
    from ft_notebook.testing._poll import PollTimeout, poll_for

    try:  # processes of the last tests may still be on their way out
        poll_for(lambda: not _processes.leftovers(token), timeout=5, what="processes to exit")
        leaked = []
    except PollTimeout:
        leaked = _processes.leftovers(token)
    survivors = _processes.kill(leaked) if leaked else []
    root = _state.get("root")
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
    if not leaked:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"ft_notebook: {len(leaked)} process(es) outlived the tests and were killed:"]
    lines += [f"  pid {p.pid}: {p.cmdline[:200]}" for p in leaked]
    if survivors:
        lines.append(f"  still alive after SIGKILL: {[p.pid for p in survivors]}")
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line, file=sys.stderr)
    if session.config.getini("ft_notebook_leaked_processes") == "fail" or survivors:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def ft_data_dir() -> Path:
    """The private data folder of this test session (journals, registry, stores)."""
    from ft_notebook._paths import data_dir

    return data_dir()


@pytest.fixture
def isolated_data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data folder of this test alone (registry, journals, snapshots), with events on
    the in-process bus; the session's folder is back afterwards."""
    import dask.config

    from ft_notebook._paths import data_dir
    from ft_notebook.config import reload_config

    settings = {
        "ft-notebook.data-dir": str(tmp_path / "data"),
        "ft-notebook.events.transport": "local",
    }
    try:
        with dask.config.set(settings):
            reload_config()
            yield data_dir()
    finally:
        reload_config()


@pytest.fixture
def unique_name() -> str:
    """A fresh name for a run, topic or snapshot, so tests sharing a folder do not mix."""
    return f"t-{uuid.uuid4().hex[:10]}"


_shared: list[Any] = []


def _close_shared_clusters() -> None:
    while _shared:
        _shared.pop().close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A real LocalCluster: 2 worker processes under nannies, 1 thread each."""
    import dask.config
    from distributed import LocalCluster

    from ft_notebook.config import cluster_dask_config

    with dask.config.set(cluster_dask_config()):
        lc = LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            worker_dashboard_address=None,
            heartbeat_interval="200ms",
            silence_logs=40,
        )
    _shared.append(lc)
    try:
        yield lc
    finally:
        if lc in _shared:
            _shared.remove(lc)
        lc.close()


@pytest.fixture(scope="module")
def client(cluster: Any) -> Iterator[Any]:
    from distributed import Client

    with Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[KernelSession]:
    """A real IPython kernel in ``tmp_path``; ``kernel.kill()`` then ``start()`` crashes it."""
    session = KernelSession(log_path=tmp_path / "kernel.log", cwd=tmp_path).start()
    try:
        yield session
    finally:
        session.shutdown()
