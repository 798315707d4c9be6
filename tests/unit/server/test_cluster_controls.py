"""The panel's cluster controls and the kernel memory reading, without a server.

Every request is checked before anything reaches the registry or a cluster: these
tests run with no cluster at all, so a check that let a request through would fail
with a different error (or start a cluster)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from ft_notebook.server._cluster_controls import (
    MAX_PANEL_WORKERS,
    ClusterControls,
    Conflict,
    kernel_usage,
)
from ft_notebook.server._manager import BadRequest, NotFound, ResilienceManager
from ft_notebook.server._models import ClusterModel

BAD_NAMES = ["../etc", "a/b", "", ".hidden", "x" * 200, "a..b", 7, None]
BAD_WORKERS = [0, -1, MAX_PANEL_WORKERS + 1, True, "2", 2.0, None, [2]]


@pytest.fixture
def controls(isolated_data_dir: Path) -> ClusterControls:
    return ClusterControls(ResilienceManager().clusters)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_cluster_name_is_refused_before_it_becomes_a_path(
    controls: ClusterControls, isolated_data_dir: Path, name: object
) -> None:
    with pytest.raises(BadRequest, match="cluster name"):
        controls.start({"name": name, "workers": 1})
    with pytest.raises(BadRequest, match="cluster name"):
        controls.scale(name, {"workers": 1})
    with pytest.raises(BadRequest, match="cluster name"):
        controls.stop(name)
    assert not (isolated_data_dir / "clusters").exists() or not any(
        (isolated_data_dir / "clusters").iterdir()
    )


@pytest.mark.parametrize("workers", BAD_WORKERS)
def test_workers_must_be_a_small_whole_number(controls: ClusterControls, workers: object) -> None:
    with pytest.raises(BadRequest, match=rf"from 1 to {MAX_PANEL_WORKERS}.*got"):
        controls.start({"name": "c", "workers": workers})
    with pytest.raises(BadRequest, match=rf"from 1 to {MAX_PANEL_WORKERS}"):
        controls.scale("c", {"workers": workers})


@pytest.mark.parametrize("body", [[], "x", 3, None])
def test_a_body_that_is_not_an_object_says_what_to_send(
    controls: ClusterControls, body: object
) -> None:
    with pytest.raises(BadRequest, match=r'JSON object such as \{"name"'):
        controls.start(body)
    with pytest.raises(BadRequest, match=r'JSON object such as \{"workers"'):
        controls.scale("c", body)


def test_scaling_or_stopping_a_cluster_that_does_not_run_is_404(controls: ClusterControls) -> None:
    with pytest.raises(NotFound, match=r"No cluster named 'ghost'.*Start it"):
        controls.scale("ghost", {"workers": 2})
    with pytest.raises(NotFound, match="No cluster named 'ghost'"):
        controls.stop("ghost")


def test_a_second_action_on_a_cluster_under_way_is_a_conflict() -> None:
    """While a start is under way (held inside the registry read here), a stop or a
    second start of the same cluster is refused; another cluster is not held up."""
    entered, release = threading.Event(), threading.Event()

    def slow_clusters() -> list[ClusterModel]:
        entered.set()
        release.wait(10)
        return []

    controls = ClusterControls(slow_clusters)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            controls.stop("busy")
        except BaseException as e:
            errors.append(e)

    first = threading.Thread(target=start)
    first.start()
    try:
        assert entered.wait(10)
        with pytest.raises(Conflict, match="A stop of cluster 'busy' is under way"):
            controls.start({"name": "busy", "workers": 1})
        with pytest.raises(Conflict, match="stop of cluster 'busy'"):
            controls.scale("busy", {"workers": 2})
    finally:
        release.set()
        first.join(10)
    assert [type(e) for e in errors] == [NotFound]  # the first went on to its own answer
    with pytest.raises(NotFound):  # and the cluster is free again
        ClusterControls(list).stop("busy")


class _Kernels:
    """A kernel manager's lookup, as jupyter_server's MappingKernelManager answers it."""

    def __init__(self, kernels: dict[str, Any]) -> None:
        self.kernels = kernels

    def list_kernel_ids(self) -> list[str]:
        return list(self.kernels)

    def get_kernel(self, kernel_id: str) -> Any:
        return self.kernels[kernel_id]


class _Kernel:
    def __init__(self, pid: int | None) -> None:
        self.provisioner = type("LocalProvisioner", (), {"pid": pid})()


@pytest.fixture
def process_with_memory() -> Iterator[subprocess.Popen[bytes]]:
    """A process holding about 64 MB it has written to."""
    code = (
        "import sys; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); sys.stdin.read()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.kill()
        proc.communicate()  # closes its stdin


def test_kernel_usage_reads_the_resident_memory_of_the_kernels_process(
    process_with_memory: subprocess.Popen[bytes],
) -> None:
    from ft_notebook.testing import poll_for

    kernels = _Kernels({"k1": _Kernel(process_with_memory.pid)})
    usage = poll_for(
        lambda: (u := kernel_usage(kernels, "k1")).rss > 64 << 20 and u,
        timeout=20,
        what="the child's 64 MB resident",
    )
    assert (usage.kernel_id, usage.pid) == ("k1", process_with_memory.pid)
    assert usage.rss == pytest.approx(
        psutil.Process(process_with_memory.pid).memory_info().rss, rel=0.1
    )


def test_kernel_usage_of_an_unknown_kernel_or_one_without_a_process_is_404(
    process_with_memory: subprocess.Popen[bytes],
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    kernels = _Kernels({"remote": _Kernel(None), "gone": _Kernel(gone.pid)})
    with pytest.raises(NotFound, match="runs no kernel 'nope'"):
        kernel_usage(kernels, "nope")
    with pytest.raises(NotFound, match="no local process"):
        kernel_usage(kernels, "remote")
    with pytest.raises(NotFound, match=f"process {gone.pid} of kernel 'gone' is gone"):
        kernel_usage(kernels, "gone")
