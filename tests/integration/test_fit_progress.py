"""ft.fit(wait=True) shows its progress while it waits: a widget updated in a real
kernel, a line redrawn on a real terminal (a pty), and a message on interrupt."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ft_notebook.testing import KernelSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SETUP = """
import ft_notebook as ft
from ft_notebook.testing import training_cluster
from ft_notebook.testing.training import counting_problem
cm = training_cluster(2)
client = cm.__enter__()
"""


@pytest.fixture
def nb(tmp_path: Path) -> Iterator[KernelSession]:
    session = KernelSession(tmp_path / "kernel.log", cwd=tmp_path).start()
    try:
        session.execute(SETUP, timeout=180).check()
        yield session
    finally:
        session.execute("cm.__exit__(None, None, None)", timeout=120)
        session.shutdown()


def test_a_widget_shows_the_run_while_fit_waits_and_the_stop_button_leaves_it_running(
    nb: KernelSession, tmp_path: Path
) -> None:
    done = nb.execute(
        f"run = ft.fit(epochs=2, cluster=client, name='bar', store={str(tmp_path / 'a')!r}, "
        "**counting_problem(size=256, batch=32, delay_s=0.05))",
        timeout=240,
    ).check()
    assert any("application/vnd.jupyter.widget-view+json" in d for d in done.displays)
    states = [c.get("state", {}) for c in done.comms]
    values = [s["value"] for s in states if isinstance(s.get("value"), int)]
    assert values[-1] == 16  # 256 samples in batches of 32, twice
    assert len(set(values)) >= 2  # it moved while the cell ran, not only at the end
    labels = [s["value"] for s in states if isinstance(s.get("value"), str)]
    assert any("bar: step 16/16 · epoch" in label for label in labels), labels[-3:]
    assert any("samples/s" in label for label in labels)

    # the stop button: SIGINT while fit waits, a second into a run of many seconds
    waiting = nb.send(
        "import os, signal, threading\n"
        "threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
        f"ft.fit(epochs=40, cluster=client, name='long', store={str(tmp_path / 'b')!r}, "
        "**counting_problem(size=256, batch=32, delay_s=0.05))"
    )
    stopped = nb.collect(waiting, timeout=240)
    assert stopped.error_name == "KeyboardInterrupt"
    assert "Stopped waiting; run 'long' goes on in the cluster." in stopped.stderr
    assert "ft.attach('long') finds it; run.cancel() stops it." in stopped.stderr
    state = nb.execute("r = ft.attach('long', cluster=client); print(r.status.value)").check()
    assert state.stdout.strip() == "RUNNING"
    nb.execute("r.cancel()").check()


def test_on_a_terminal_the_line_is_redrawn_until_the_run_ends(tmp_path: Path) -> None:
    script = SETUP + textwrap.dedent(
        f"""
        try:
            ft.fit(epochs=2, cluster=client, name='tty', store={str(tmp_path / "c")!r},
                   **counting_problem(size=256, batch=32, delay_s=0.05))
        finally:
            cm.__exit__(None, None, None)
        """
    )
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
        start_new_session=True,
    )
    os.close(follower)
    seen = b""
    try:
        while True:  # read the terminal until the process closes it
            ready, _, _ = select.select([leader], [], [], 240)
            if not ready:
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the other side is closed
                break
            if not chunk:
                break
            seen += chunk
    finally:
        proc.wait(60)
        os.close(leader)
    assert proc.returncode == 0, seen[-2000:]
    text = seen.decode(errors="replace")
    redraws = [part for part in text.split("\r") if part.startswith("tty: step")]
    assert len(redraws) >= 2, text[-2000:]
    assert "tty: step 16/16" in redraws[-1]
    assert "COMPLETED" in redraws[-1]
