"""The pytest plugin itself: isolation, the leaked-process finaliser, the kernel fixture."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from ft_notebook.testing import KernelSession, PollTimeout, poll_for

LEAKY_TEST = """
import subprocess, sys

def test_starts_a_daemon_and_forgets_it(tmp_path):
    log = open(tmp_path / "daemon.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        stdout=log, stderr=log, start_new_session=True,
    )
    (tmp_path.parent.parent / "daemon.pid").write_text(str(proc.pid))
"""


def test_finaliser_kills_a_detached_leftover_and_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaky=LEAKY_TEST)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-o",
        "ft_notebook_leaked_processes=fail",
        f"--basetemp={pytester.path / 'tmp'}",
    )
    pid = int((pytester.path / "daemon.pid").read_text())
    result.stdout.fnmatch_lines(
        ["*1 process(es) outlived the tests and were killed*", f"*pid {pid}*"]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


SIDE_BY_SIDE = """
import os
from pathlib import Path
from ft_notebook._paths import data_dir

def test_where(ft_data_dir):
    assert data_dir() == ft_data_dir
    seen = Path(os.environ["FT_SEEN"]) / os.environ["PYTEST_XDIST_WORKER"]
    seen.write_text(str(ft_data_dir))
"""


def test_each_xdist_worker_has_its_own_data_dir(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """make test runs files side by side (pytest-xdist): a lab server started by one
    test listed the clusters and runs of the others, which shared the data folder."""
    pytester.makepyfile(test_side_a=SIDE_BY_SIDE, test_side_b=SIDE_BY_SIDE)
    monkeypatch.setenv("FT_SEEN", str(pytester.path))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile"
    )
    result.assert_outcomes(passed=2)
    folders = {p.name: Path(p.read_text()) for p in pytester.path.glob("gw*")}
    assert sorted(folders) == ["gw0", "gw1"], folders
    assert folders["gw0"] != folders["gw1"]
    assert folders["gw0"].parent == folders["gw1"].parent  # both under the session's root


def test_a_clean_run_passes_and_uses_a_private_data_dir(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_clean="""
import os
from pathlib import Path

def test_data_dir(ft_data_dir):
    assert ft_data_dir == Path(os.environ["DASK_FT_NOTEBOOK__DATA_DIR"])
    assert Path.home() not in ft_data_dir.parents
    assert ft_data_dir.stat().st_mode & 0o077 == 0
"""
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-o", "ft_notebook_leaked_processes=fail"
    )
    result.assert_outcomes(passed=1)


def test_poll_for_returns_the_value_and_reports_the_last_one_on_timeout() -> None:
    start = time.monotonic()
    assert poll_for(lambda: time.monotonic() - start > 0.05 and "ready", timeout=5) == "ready"
    with pytest.raises(PollTimeout, match=r"never did not hold within 0.05 s \(last value: 0\)"):
        poll_for(lambda: 0, timeout=0.05, what="never")
    with pytest.raises(PollTimeout, match="last error: ZeroDivisionError"):
        poll_for(lambda: 1 / 0, timeout=0.05)


def test_kernel_fixture_runs_cells_and_survives_a_real_sigkill(kernel: KernelSession) -> None:
    first = kernel.execute("x = 41\nimport os\nprint(os.getpid())\nx + 1").check()
    assert first.result == "42"
    assert int(first.stdout) == kernel.pid
    assert kernel.env.get("DASK_FT_NOTEBOOK__DATA_DIR") == os.environ["DASK_FT_NOTEBOOK__DATA_DIR"]
    failed = kernel.execute("1 / 0")
    assert (failed.status, failed.error_name) == ("error", "ZeroDivisionError")

    old_pid = kernel.pid
    kernel.kill()
    assert (
        not psutil.pid_exists(old_pid) or psutil.Process(old_pid).status() == psutil.STATUS_ZOMBIE
    )
    kernel.start()
    assert kernel.pid != old_pid
    after = kernel.execute("'x' in globals()").check()
    assert after.result == "False"
    assert Path(kernel.log_path).exists()
