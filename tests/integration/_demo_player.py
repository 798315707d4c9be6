"""Play a demo notebook through nbclient cell by cell, as a person in JupyterLab would.

Cells carry the tags that say where a person stops or breaks things:

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

Each demo's plays are in a test file of their own (``test_demo_0N.py``): ``make test``
runs files side by side (pytest-xdist, ``--dist loadfile``).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync

from ft_notebook.testing import _processes
from ft_notebook.testing._poll import PollTimeout, poll_for

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


def paced(name: str, tmp_path: Path) -> DemoPlayer:
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


def restarted(name: str, tmp_path: Path) -> tuple[DemoPlayer, int]:
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
