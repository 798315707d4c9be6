"""Replay in real kernels: it finds the cell that made a value whatever ran between,
it is checked, and what it cannot bring back is reported, never restored wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from ft_notebook.testing import NAMESPACE_HASHES, KernelSession, parse_hashes

pytestmark = pytest.mark.integration


def _restart(nb: KernelSession) -> str:
    nb.kill()
    nb.start()
    nb.execute("%load_ext ft_notebook").check()
    return nb.execute("%ft restore").check().stdout


def test_a_replay_finds_its_cell_across_saves_reruns_and_restores(notebook: KernelSession) -> None:
    nb = notebook
    nb.execute("import numpy as np\nrng = np.random.default_rng(11)").check()
    nb.execute("%ft save").check()
    stream_cell = "stream = (round(float(v), 12) for v in rng.random(4))"
    nb.execute(stream_cell).check()  # a generator drawing from rng: kept by replay
    nb.execute("%ft save").check()
    nb.execute("rng.random(2)\nother = 1").check()  # rng moves on after the cell
    nb.execute(stream_cell).check()  # run again, out of order: this run made it now
    nb.execute("other = 2").check()
    saved = nb.execute("%ft save").check().stdout
    assert "kept by replaying their cells: stream" in saved
    before = parse_hashes(nb.execute(NAMESPACE_HASHES, silent=True).check().stdout)
    expected = nb.execute("print(list(stream))").check().stdout  # after the save
    out = _restart(nb)
    assert "(1 by replaying" in out, out
    after = parse_hashes(nb.execute(NAMESPACE_HASHES, silent=True).check().stdout)
    assert after == before  # rng as the snapshot had it, not as the replay left it
    nb.execute("x = 5").check()
    nb.execute("%ft save").check()  # the restored cells go into the next snapshot
    out = _restart(nb)  # a second crash: the replay still finds its cell
    assert "(1 by replaying" in out, out
    assert nb.execute("print(list(stream))").check().stdout == expected


def test_a_replay_that_reads_a_changed_file_is_reported_not_restored(
    notebook: KernelSession, tmp_path: Path
) -> None:
    nb = notebook
    (tmp_path / "data.txt").write_text("a\nb\nc\n")
    nb.execute("import pathlib").check()
    nb.execute("feed = (line for line in pathlib.Path('data.txt').read_text().split())").check()
    nb.execute("%ft save").check()
    (tmp_path / "data.txt").write_text("a\nB\nc\n")  # changed before the restore
    out = _restart(nb)
    assert "feed (generator): NOT restored, its replay differs" in out, out
    assert "feed" not in nb.execute("print(sorted(globals()))").check().stdout


def test_status_lists_what_is_replayed_and_what_is_not_protected(notebook: KernelSession) -> None:
    nb = notebook
    nb.execute("import threading\nworker = threading.Thread(target=print)").check()
    nb.execute("squares = (i * i for i in range(5))").check()
    saved = nb.execute("%ft save").check().stdout
    assert "worker: NOT protected: it cannot be pickled" in saved, saved
    status = nb.execute("%ft status").check().stdout
    assert "1 kept by replay, 1 not protected" in status, status
    assert "kept by replaying their cells: squares" in status
    assert "worker: NOT protected" in status
    out = _restart(nb)
    assert "worker (threading.Thread): lost: it cannot be pickled" in out, out
