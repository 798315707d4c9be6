"""The launcher's checks and its handshake with the daemon, without a cluster."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import psutil
import pytest

from ft_notebook.cli import main
from ft_notebook.cluster._launch import _read_answer, check_port_free, kill_group, listen_host
from ft_notebook.exceptions import ClusterError
from ft_notebook.testing import poll_for


def test_a_port_in_use_is_refused_before_anything_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ClusterError, match=rf"port {port} on 127.0.0.1 is already in use"):
            check_port_free("127.0.0.1", port, "scheduler port")
    check_port_free("127.0.0.1", 0, "scheduler port")  # 0: any free port


def test_loopback_unless_an_interface_is_configured() -> None:
    assert listen_host(None) == "127.0.0.1"
    assert listen_host("lo") == "127.0.0.1"
    with pytest.raises(ClusterError, match=r"'no-such-nic0'.*null to stay on loopback"):
        listen_host("no-such-nic0")


def test_the_handshake_reads_one_line_or_reports_eof_and_lateness() -> None:
    r, w = os.pipe()
    late = threading.Timer(0.05, lambda: (os.write(w, b'{"ok": true, "entry": {}}\n'), os.close(w)))
    late.start()
    assert _read_answer(r, timeout=10) == {"ok": True, "entry": {}}
    late.join()  # before its fd number can be reused below
    os.close(r)
    r, w = os.pipe()
    os.write(w, b'{"ok": tr')
    os.close(w)
    assert _read_answer(r, timeout=10) is None  # the daemon died mid-sentence
    os.close(r)
    r, w = os.pipe()
    assert _read_answer(r, timeout=0.05) == {"ok": False, "timeout": True}
    os.close(r)
    os.close(w)


def test_kill_group_leaves_no_process_of_a_failed_start() -> None:
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print('ready', flush=True); time.sleep(600)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True
    ) as leader:
        assert leader.stdout is not None
        assert leader.stdout.readline() == "ready\n"
        family = [leader.pid] + [c.pid for c in psutil.Process(leader.pid).children()]
        assert len(family) == 2
        kill_group(leader.pid)
        leader.wait(timeout=10)
    poll_for(
        lambda: (
            not any(
                psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                for p in family
            )
        ),
        timeout=10,
        what="the group to be gone",
    )


def test_cli_status_of_a_cluster_that_does_not_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "status", "--name", "not-running"]) == 2
    err = capsys.readouterr().err
    assert "No cluster named 'not-running'" in err
    assert "ft-notebook cluster up" in err
    assert main(["cluster", "down", "--name", "not-running"]) == 0
    assert "was not running" in capsys.readouterr().out
    assert main(["cluster", "list"]) == 0
