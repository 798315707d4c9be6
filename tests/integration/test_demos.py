"""The demo notebooks run as a person runs them, in real kernels, through nbclient.

Run All: every cell at once after the other. Cells tagged ``crash`` are where the
demo kills its kernel: the test SIGKILLs the kernel there instead, starts a fresh one,
and goes on with the next cells. Every variable must come back equal by content hash.

Paced (issue 38): a person stops to read. Cells carry the tags that say where:

- ``ft-starts``: the cell starts a run or a service (the person watches its
  dashboard for a while after it);
- ``ft-fault``: the cell kills, hangs or corrupts something (the person reads it first);
- ``crash``: the cell kills its own kernel (a fresh one starts, as Jupyter does);
- ``ft-restart``: a kernel restart right after this cell is rehearsed;
  ``ft-restart-during``: a restart while this cell still runs (it blocks on a run);
- ``raises-exception``: the cell must fail (nbclient's own tag).

A paced play sleeps ``PACE_S`` of wall time after each ``ft-starts`` cell and before
each ``ft-fault`` cell (once when both fall between the same two cells): the sleep is
the point, a person looking at the dashboard. A restart play restarts the kernel at
the tagged cell, then runs the notebook again from the top through that cell (the
demos' own recovery path: their starting cells find the run or service still there)
and goes on to the end. Each play leaves no process behind: every process its
kernel starts carries a marker of the play, and none may be alive 30 s after the end.
Each paced or restart play is a test of its own, so that pytest-xdist can run them
side by side.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync

from ft_notebook.testing import NAMESPACE_HASHES, KernelSession, _processes, parse_hashes
from ft_notebook.testing._poll import PollTimeout, poll_for

pytestmark = pytest.mark.integration

DEMOS = Path(__file__).parents[2] / "demos"

#: What a person watching a dashboard takes before the next cell (issue 38: 5-10 s).
PACE_S = 15.0

RESTART_TAGS = ("ft-restart", "ft-restart-during")


def leftovers(token: str) -> list[str]:
    """The processes marked with ``token`` still alive 30 s from now (killed then, so
    that one test's leak does not fail the next): a cluster the demo did not stop."""

    def alive() -> list[str]:
        return [f"pid {p.pid}: {p.cmdline[:160]}" for p in _processes.leftovers(token)]

    try:
        poll_for(lambda: not alive(), timeout=30, what="the demo's processes to exit")
    except PollTimeout:
        left = alive()
        _processes.kill(_processes.leftovers(token))
        return left
    return []


class DemoPlayer:
    """One demo, its kernel (a fresh one after a crash or restart), and its processes.

    Every process the kernel starts (clusters, their daemons and workers) carries a
    marker of this play in its environment; :meth:`leftovers` finds those still alive.
    """

    def __init__(self, name: str, tmp_path: Path) -> None:
        self.path = DEMOS / f"{name}.ipynb"
        self.nb = nbformat.read(self.path, as_version=4)
        self.tmp_path = tmp_path
        self.token = uuid.uuid4().hex
        self.env = dict(
            os.environ,
            JPY_SESSION_NAME=str(tmp_path / self.path.name),
            # a registry of its own: demos played at once in parallel tests use the
            # same cluster names
            DASK_FT_NOTEBOOK__DATA_DIR=str(tmp_path / "data"),
            **{_processes.MARKER: self.token},
        )
        self.client = NotebookClient(
            self.nb,
            timeout=300,
            kernel_name="python3",
            resources={"metadata": {"path": str(tmp_path)}},
        )
        self.log: list[str] = []  # what happened when, for a failure's message
        self._t0 = time.monotonic()

    @property
    def code_cells(self) -> list[int]:
        return [i for i, c in enumerate(self.nb.cells) if c.cell_type == "code"]

    def tags(self, index: int) -> list[str]:
        return list(self.nb.cells[index].metadata.get("tags", []))

    def tagged(self, tag: str) -> list[int]:
        return [i for i in self.code_cells if tag in self.tags(i)]

    def note(self, what: str) -> None:
        self.log.append(f"{time.monotonic() - self._t0:7.1f} s  {what}")

    # -- the kernel

    def start(self) -> None:
        c = self.client
        c.km = c.create_kernel_manager()
        c.start_new_kernel(env=self.env, cwd=str(self.tmp_path))
        c.start_new_kernel_client()
        self.note("kernel started")

    def stop(self) -> None:
        """Shut the kernel down as JupyterLab does (a shutdown request, then a kill)."""
        if self.client.km is not None:
            self.client._cleanup_kernel()
            self.client.km = None  # a dead kernel leaves it set

    def restart(self) -> None:
        self.stop()
        self.start()

    # -- cells

    def run(self, index: int) -> None:
        tags = self.tags(index)
        self.note(f"cell {index} {tags}")
        if "crash" in tags:
            try:
                self.client.execute_cell(self.nb.cells[index], index)
            except DeadKernelError:
                self.note("the kernel died, as the cell meant it to")
            else:
                raise AssertionError(f"cell {index} was to kill its kernel, and did not")
            self.restart()
            return
        self.client.execute_cell(self.nb.cells[index], index)  # raises on an error

    def run_into(self, index: int, timeout: float = 120.0) -> None:
        """Send cell ``index`` and return once it shows something (a blocking run has
        started and shows its progress), leaving it running."""
        kc = self.client.kc
        assert kc is not None
        self.note(f"cell {index} sent, to be left running")
        msg_id = kc.execute(self.nb.cells[index].source)
        get = run_sync(kc.get_iopub_msg)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = get(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "error":
                raise AssertionError(f"cell {index} failed: {msg['content']['evalue']}")
            if msg["msg_type"] in ("display_data", "comm_open"):
                self.note(f"cell {index} shows its progress")
                return
        raise AssertionError(f"cell {index} showed nothing within {timeout} s")

    def play(self, cells: list[int], pace_s: float = 0.0) -> None:
        pause = False
        for index in cells:
            pause = pause or "ft-fault" in self.tags(index)
            if pace_s and pause:
                self.note(f"a person looks at the dashboard for {pace_s:g} s")
                time.sleep(pace_s)  # wall time between two cells is what this test is about
            self.run(index)
            pause = "ft-starts" in self.tags(index)

    def play_with_restart(self) -> int:
        """Restart the kernel at the demo's restart cell; return that cell's index."""
        [at] = [i for i in self.code_cells if set(self.tags(i)) & set(RESTART_TAGS)]
        before = [i for i in self.code_cells if i < at]
        self.play(before)
        if "ft-restart-during" in self.tags(at):
            self.run_into(at)
        else:
            self.run(at)
        self.note("restarting the kernel")
        self.restart()
        self.play([i for i in self.code_cells if i <= at])  # the recovery path: from the top
        self.play([i for i in self.code_cells if i > at])
        return at

    # -- after it

    def finish(self) -> list[str]:
        """Stop the kernel; return the processes of this play still alive 30 s later."""
        self.stop()
        return leftovers(self.token)

    def outputs(self, index: int) -> str:
        """The text a cell showed (its streams and plain-text results)."""
        parts: list[str] = []
        for out in self.nb.cells[index].get("outputs", []):
            data: Any = out.get("data", {})
            parts.append(out.get("text", "") or data.get("text/plain", ""))
        return "".join(parts)

    def history(self) -> str:
        return "\n".join(self.log)


ALL = sorted(DEMOS.glob("*.ipynb"))


def test_every_demo_is_tagged_for_a_person_s_pace() -> None:
    """A demo that starts a run or a service says where (a paced play pauses there),
    and every training or serving demo rehearses a kernel restart once."""
    for path in ALL:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.get("outputs") for c in code), f"{path.name}: outputs committed"
        tags = [t for c in code for t in c.metadata.get("tags", [])]
        assert "ft-fault" in tags or "crash" in tags, f"{path.name}: no fault cell tagged"
        trains_or_serves = any("ft.fit(" in c.source or "ft.serve(" in c.source for c in code)
        if trains_or_serves:
            assert "ft-starts" in tags, f"{path.name}: the cell that starts a run is not tagged"
            restarts = [t for t in tags if t in RESTART_TAGS]
            assert len(restarts) == 1, f"{path.name}: {restarts}"


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_demo_notebook_runs_and_survives_its_crash(path: Path, tmp_path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    token = uuid.uuid4().hex
    env = dict(
        os.environ,
        JPY_SESSION_NAME=str(tmp_path / path.name),
        DASK_FT_NOTEBOOK__DATA_DIR=str(tmp_path / "data"),
        **{_processes.MARKER: token},
    )
    kernel = KernelSession(tmp_path / "kernel.log", cwd=tmp_path, env=env).start()
    crashed = False
    before: dict[str, str] = {}
    try:
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            tags = cell.metadata.get("tags", [])
            if "crash" in tags:
                before = parse_hashes(kernel.execute(NAMESPACE_HASHES, silent=True).check().stdout)
                kernel.kill()
                kernel.start()
                crashed = True
                continue
            result = kernel.execute(cell.source, timeout=300)
            if "raises-exception" in tags:
                assert result.status == "error", cell.source
            else:
                result.check()
        if crashed:
            after = parse_hashes(kernel.execute(NAMESPACE_HASHES, silent=True).check().stdout)
            changed = {k for k in before if before[k] != after.get(k)}
            # the cells after the crash may train on: only what they assign may differ
            assert changed <= {"model", "opt", "loss"}, changed
            assert set(before) <= set(after)
    finally:
        kernel.shutdown()
    left = leftovers(token)
    assert not left, f"{path.stem} left processes running:\n" + "\n".join(left)


def _paced(name: str, tmp_path: Path) -> DemoPlayer:
    player = DemoPlayer(name, tmp_path)
    player.start()
    try:
        player.play(player.code_cells, pace_s=PACE_S)
    except BaseException:
        print(player.history())
        raise
    finally:
        left = player.finish()
    assert not left, f"{name} left processes running:\n" + "\n".join(left)
    return player


def _restarted(name: str, tmp_path: Path) -> tuple[DemoPlayer, int]:
    player = DemoPlayer(name, tmp_path)
    player.start()
    try:
        at = player.play_with_restart()
    except BaseException:
        print(player.history())
        raise
    finally:
        left = player.finish()
    assert not left, f"{name} left processes running:\n" + "\n".join(left)
    return player, at


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_01_at_a_person_s_pace(tmp_path: Path) -> None:
    player = _paced("01_crash_and_transaction", tmp_path)
    [restored] = [i for i in player.code_cells if "%ft restore" in player.nb.cells[i].source]
    assert "restored" in player.outputs(restored).lower(), player.outputs(restored)


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_demo_02_at_a_person_s_pace(tmp_path: Path) -> None:
    player = _paced("02_elastic_training", tmp_path)
    [kill, hang, down] = player.tagged("ft-fault")
    assert "killing" in player.outputs(kill), player.outputs(kill)
    assert "hanging" in player.outputs(hang), player.outputs(hang)
    print(player.outputs(down))  # still training, or ended: the demo handles both
    print(player.history())


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_03_at_a_person_s_pace(tmp_path: Path) -> None:
    player = _paced("03_resilient_serving", tmp_path)
    print(player.history())


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_04_at_a_person_s_pace(tmp_path: Path) -> None:
    player = _paced("04_byzantine_and_planning", tmp_path)
    print(player.history())


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_02_survives_a_kernel_restart_while_it_trains(tmp_path: Path) -> None:
    """Restarted right after the run started: the run goes on in the cluster, and the
    cell that started it attaches to it from the new kernel instead of starting
    another (a second run would fight the first for the workers); the faults after it
    act on the attached run."""
    player, at = _restarted("02_elastic_training", tmp_path)
    assert "attached to demo-elastic-" in player.outputs(at), player.outputs(at)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_03_survives_a_kernel_restart_while_it_serves(tmp_path: Path) -> None:
    """Restarted while its callers were sending requests: the service lives in the
    cluster, so the new kernel attaches to it (``ft.service``) instead of failing to
    create a second ``ranker``, and the kills after it are served through."""
    player, at = _restarted("03_resilient_serving", tmp_path)
    [serve] = player.tagged("ft-starts")
    assert "attached to the running service" in player.outputs(serve), player.outputs(serve)
    assert at > serve


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_04_survives_a_kernel_restart_during_a_blocking_fit(tmp_path: Path) -> None:
    """Restarted while ``ft.fit`` waited for the median run (a cell that blocks, as a
    person restarts a kernel that seems stuck): the run trained on in the cluster, and
    the same cell run again waits for it instead of refusing its name."""
    player, at = _restarted("04_byzantine_and_planning", tmp_path)
    assert "attached to demo-median-" in player.outputs(at), player.outputs(at)


@pytest.mark.slow
def test_the_main_job_trains_through_a_killed_worker(tmp_path: Path) -> None:
    """``make demo``: on a private cluster of its own (a fresh data folder, so a fresh
    registry), a worker is killed mid-run and the report says what happened."""
    import subprocess
    import sys

    env = dict(os.environ, DASK_FT_NOTEBOOK__DATA_DIR=str(tmp_path / "data"))
    script = Path(__file__).parents[2] / "demos" / "train_with_failure.py"
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=400
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = out.stdout
    import re

    found = re.search(r"0 committed steps lost, workers (\d+) -> (\d+)", report)
    assert found is not None, report
    assert int(found[2]) == int(found[1]) - 1
    assert "exactly 3 times in 3 epochs: yes" in report, report
    # the killed worker trained in the run again, or the report says why it did not
    rejoined = re.search(r"worker \S+ came back \(its nanny restarted it\) and trained", report)
    assert rejoined or "did not rejoin the run" in report, report
    assert "stopped the cluster this demo started" in report, report
