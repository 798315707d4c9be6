"""The registry: atomic entries, pruning of dead ones, and one folder per user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from ft_notebook.cluster._certs import CertPaths
from ft_notebook.cluster._registry import ClusterInfo, Registry
from ft_notebook.exceptions import ClusterError


def _info(name: str, pid: int | None = None, **kw: object) -> ClusterInfo:
    pid = os.getpid() if pid is None else pid
    started = psutil.Process(pid).create_time() if psutil.pid_exists(pid) else 0.0
    fields: dict[str, object] = {
        "name": name,
        "address": "tls://127.0.0.1:1234",
        "pid": pid,
        "pid_started": started,
        "started": time.time(),
        "owner_uid": os.getuid(),
        "certs": CertPaths(Path("/x/ca.pem"), Path("/x/cert.pem"), Path("/x/key.pem")),
        "log": "/x/cluster.log",
        "workers": {"cpu0": 11, "cpu1": 12},
        "gpus": ("GPU-1",),
    }
    fields.update(kw)
    return ClusterInfo(**fields)  # type: ignore[arg-type]


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    return Registry.at(tmp_path / "data")


def test_an_entry_round_trips_and_is_private(registry: Registry) -> None:
    info = _info("alpha")
    registry.write(info)
    assert registry.get("alpha") == info
    assert [c.name for c in registry.list()] == ["alpha"]
    path = registry.entry_path("alpha")
    assert path.stat().st_mode & 0o777 == 0o600
    assert registry.root.stat().st_mode & 0o777 == 0o700
    assert not list(registry.root.glob(".*.tmp"))  # the temporary file was renamed


def test_an_entry_whose_process_is_gone_is_pruned_on_read(registry: Registry) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    registry.write(_info("gone", pid=dead.pid, pid_started=time.time() - 5))
    registry.write(_info("alive"))
    assert [c.name for c in registry.list()] == ["alive"]
    assert not registry.entry_path("gone").exists()


def test_a_reused_pid_does_not_keep_an_entry_alive(registry: Registry) -> None:
    # our own pid, but a start time that is not ours: another process had the pid
    registry.write(_info("reused", pid_started=psutil.Process().create_time() - 3600))
    assert registry.get("reused") is None
    assert not registry.entry_path("reused").exists()


def test_a_damaged_entry_is_pruned_not_fatal(registry: Registry) -> None:
    registry.entry_path("torn").write_text('{"name": "torn", "addr')
    registry.entry_path("odd").write_text(json.dumps({"name": "odd"}))
    registry.write(_info("fine"))
    assert [c.name for c in registry.list()] == ["fine"]
    assert not registry.entry_path("torn").exists()


def test_remove_only_touches_the_entry_of_the_given_process(registry: Registry) -> None:
    registry.write(_info("beta"))
    assert not registry.remove("beta", pid=1)  # a newer cluster's entry stays
    assert registry.get("beta") is not None
    assert registry.remove("beta", pid=os.getpid())
    assert not registry.remove("beta")


def test_concurrent_writers_never_leave_a_torn_entry(registry: Registry) -> None:
    code = (
        "import sys, time, os\n"
        "from dataclasses import replace\n"
        "from pathlib import Path\n"
        "from ft_notebook.cluster._registry import Registry, ClusterInfo\n"
        "r = Registry(Path(sys.argv[1]))\n"
        "info = ClusterInfo.from_dict(__import__('json').loads(sys.argv[2]))\n"
        "for i in range(200):\n"
        "    r.write(replace(info, workers={f'w{j}': j for j in range(i % 50)}))\n"
    )
    info = _info("busy")
    registry.write(info)
    args = [sys.executable, "-c", code, str(registry.root), json.dumps(info.to_dict())]
    writers = [subprocess.Popen(args) for _ in range(2)]
    reads = 0
    while any(w.poll() is None for w in writers):
        raw = json.loads(registry.entry_path("busy").read_text())  # never half written
        assert raw["name"] == "busy"
        reads += 1
    assert [w.returncode for w in writers] == [0, 0]
    assert reads > 0
    assert registry.get("busy") is not None


def test_two_data_folders_are_two_registries(tmp_path: Path) -> None:
    mine, theirs = Registry.at(tmp_path / "me"), Registry.at(tmp_path / "you")
    mine.write(_info("shared-name"))
    theirs.write(_info("shared-name", address="tls://127.0.0.1:9"))
    theirs.write(_info("only-theirs"))
    assert [c.address for c in mine.list()] == ["tls://127.0.0.1:1234"]
    assert [c.name for c in theirs.list()] == ["only-theirs", "shared-name"]


def test_a_folder_others_can_write_is_refused_with_the_fix(tmp_path: Path) -> None:
    data = tmp_path / "open"
    (data / "clusters").mkdir(parents=True)
    os.chmod(data / "clusters", 0o777)
    with pytest.raises(ClusterError, match=r"chmod go-w .*clusters") as info:
        Registry.at(data)
    assert "ft-notebook.data-dir" in str(info.value)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a folder to another user")
def test_a_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "theirs"
    (data / "clusters").mkdir(parents=True, mode=0o700)
    os.chown(data / "clusters", 65534, 65534)
    with pytest.raises(ClusterError, match="belongs to uid 65534"):
        Registry.at(data)


@pytest.mark.skipif(os.getuid() == 0, reason="root may write anywhere")
def test_a_folder_without_write_permission_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "ro"
    (data / "clusters").mkdir(parents=True, mode=0o500)
    with pytest.raises(ClusterError, match="cannot be used"):
        Registry.at(data)


def test_the_start_lock_is_exclusive_and_times_out_with_a_message(registry: Registry) -> None:
    code = (
        "import sys, time\nfrom pathlib import Path\n"
        "from ft_notebook.cluster._registry import Registry\n"
        "with Registry(Path(sys.argv[1])).starting('locked', 5):\n"
        "    print('held', flush=True); sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(registry.root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdin is not None
        assert holder.stdout is not None
        try:
            assert holder.stdout.readline() == "held\n"
            with (
                pytest.raises(ClusterError, match="Another process"),
                registry.starting("locked", 0.2),
            ):
                pass
            with registry.starting("other", 0.2):  # names lock independently
                pass
        finally:
            holder.stdin.close()
            holder.wait(timeout=30)
    with registry.starting("locked", 5):
        pass


def test_names_are_checked_before_they_become_paths(registry: Registry) -> None:
    from ft_notebook.exceptions import UnsafeName

    with pytest.raises(UnsafeName):
        registry.entry_path("../escape")
    assert replace(_info("ok"), name="ok").name == "ok"


def test_a_thousand_parallel_opens_from_threads_all_succeed(tmp_path: Path) -> None:
    """The Jupyter server opens the registry from many threads of one process at once;
    a writability probe shared by the process made a third of them fail (issue 38)."""
    from concurrent.futures import ThreadPoolExecutor

    def open_registry(_: int) -> str | None:
        try:
            Registry.at(tmp_path)
        except ClusterError as e:
            return str(e)
        return None

    with ThreadPoolExecutor(max_workers=32) as pool:
        errors = [e for e in pool.map(open_registry, range(1200)) if e is not None]
    assert errors == [], f"{len(errors)} of 1200 failed, the first: {errors[0]}"
    assert [p.name for p in (tmp_path / "clusters").iterdir()] == []  # no probe left
