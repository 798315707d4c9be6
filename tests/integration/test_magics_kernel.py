"""%ft magics in a real kernel: snapshots survive a SIGKILL of the kernel process."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ft_notebook.testing import NAMESPACE_HASHES, KernelSession, parse_hashes, poll_for


def _restart(nb: KernelSession) -> None:
    nb.kill()
    nb.start()
    nb.execute("%load_ext ft_notebook").check()


def test_every_variable_comes_back_after_sigkill(notebook: KernelSession) -> None:
    nb = notebook
    nb.execute("%ft auto on").check()
    nb.execute("import numpy as np, torch\nbig = np.random.default_rng(1).random(200_000)").check()
    nb.execute(
        "alias = big\nwindow = big[100:200]\nconfig = {'lr': 3e-4, 'tags': ['a', 'b']}"
    ).check()
    nb.execute(
        "torch.manual_seed(0)\nmodel = torch.nn.Linear(16, 4)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model(torch.randn(2, 16)).sum().backward(); opt.step()"
    ).check()
    before = parse_hashes(nb.execute(NAMESPACE_HASHES, silent=True).check().stdout)
    # the next cell waits for the last one's snapshot to be written (as in
    # test_restore_continuation): under the full suite's load the kill came first once,
    # and model and opt, the last cell's, were not in the newest snapshot
    nb.execute("%ft status").check()
    _restart(nb)
    out = nb.execute("%ft restore").check()
    assert "lost" not in out.stdout, out.stdout
    assert parse_hashes(nb.execute(NAMESPACE_HASHES, silent=True).check().stdout) == before
    checks = nb.execute(
        "print(alias is big, window.base is not None, "
        "opt.param_groups[0]['params'][0] is model.weight)\n"
        "big[150] = -7.0\nprint(window[50])"
    ).check()
    assert checks.stdout.split() == ["True", "True", "True", "-7.0"]


def test_a_replay_draws_from_numpys_unseeded_global_generator_as_before(
    notebook: KernelSession,
) -> None:
    # `import numpy` leaves numpy.random unloaded: its global generator is born in the
    # cell that first uses it, and the snapshot must hold the state it was born with
    nb = notebook
    nb.execute("%ft auto on").check()
    nb.execute("import numpy as np").check()
    nb.execute("vals = np.random.rand(3).tolist()\ndraws = (v for v in vals)").check()
    nb.execute("%ft save").check()  # durable now (auto snapshots are written meanwhile)
    _restart(nb)
    out = nb.execute("%ft restore").check().stdout
    assert "by replaying" in out, out
    assert "NOT restored" not in out, out
    same = nb.execute("print(list(draws) == vals, len(vals))").check().stdout.split()
    assert same == ["True", "3"]


def test_unpicklable_objects_are_replayed_and_reported(
    notebook: KernelSession, tmp_path: Path
) -> None:
    nb = notebook
    (tmp_path / "log.txt").write_text("one\ntwo\nthree\n")
    nb.execute("%ft auto on").check()
    nb.execute("import random, threading\nrandom.seed(7)\nnoise = random.random()").check()
    nb.execute("draws = (random.random() for _ in range(3))\nlock = threading.Lock()").check()
    nb.execute("fh = open('log.txt')\nheader = fh.readline()").check()
    for name in "abcdefgh":
        (tmp_path / f"{name}.txt").write_text(name)
    # which file it opens depends on the random state the cell saw
    nb.execute("pick = open(random.choice('abcdefgh') + '.txt')").check()
    picked = nb.execute("print(pick.name)").check().stdout.strip()
    nb.execute("after = [random.random() for _ in range(5)]").check()  # the state moves on
    nb.execute("ticker = iter(range(10))\nmoving = (i for i in range(5))\nnext(moving)").check()
    nb.execute("next(moving)").check()  # only a later cell advanced it
    expected = nb.execute("print(list(draws))").check().stdout
    nb.execute("%ft save").check()  # draws is now exhausted: snapshot records that too
    _restart(nb)
    out = nb.execute("%ft restore").check().stdout
    assert "moving (generator): NOT restored, its replay differs" in out
    assert "draws (generator): NOT restored" in out  # exhausted before the kill, fresh after replay
    assert nb.execute(
        "print(fh.readline().strip(), header.strip(), lock.locked())"
    ).check().stdout.split() == [
        "two",
        "one",
        "False",
    ]
    assert "moving" not in nb.execute("print(sorted(globals()))").check().stdout
    assert nb.execute("print(pick.name)").check().stdout.strip() == picked
    nb.execute("pick.close()").check()
    nb.execute("fh.close()").check()
    assert expected.strip().startswith("[0.")


def test_failing_checkpoint_cell_rolls_back_everything(notebook: KernelSession) -> None:
    nb = notebook
    nb.execute(
        "import numpy as np\nweights = np.zeros(50_000)\nhistory = [1, 2]\ncount = 3"
    ).check()
    nb.execute("head = weights[:10]\nsame = history").check()  # a view and an alias
    failed = nb.execute(
        "%%ft checkpoint\nweights += 1\nhistory.append(99)\ncount = 4\nfresh = 'new'\n"
        "raise ValueError('bad batch')"
    )
    assert (failed.status, failed.error_name) == ("error", "ValueError")
    assert "rolled back" in failed.stdout
    state = nb.execute("print(weights.sum(), history, count, 'fresh' in globals())").check()
    assert state.stdout.split() == ["0.0", "[1,", "2]", "3", "False"]
    # what refers to a rolled-back object is rolled back with it, identity included
    links = nb.execute("print(np.shares_memory(head, weights), same is history, head.sum())")
    assert links.check().stdout.split() == ["True", "True", "0.0"]
    ok = nb.execute("%%ft checkpoint\nimport threading\nguard = threading.Lock()").check()
    assert "committed" in ok.stdout
    _restart(nb)
    out = nb.execute("%ft restore").check().stdout  # replays the cell's body, not the magic
    assert "restored" in out
    assert "lost" not in out
    assert nb.execute("print(guard.locked(), count)").check().stdout.split() == ["False", "3"]


def test_small_change_beside_big_array_writes_little(notebook: KernelSession) -> None:
    nb = notebook
    nb.execute(
        "import numpy as np\nbig = np.random.default_rng(0).random(5_000_000)\nsmall = 1"
    ).check()
    first = nb.execute("%ft save").check().stdout
    assert "wrote 38.1 MB" in first or "wrote 38.2 MB" in first, first
    nb.execute("%ft auto on").check()
    nb.execute("small = 2").check()
    written = nb.execute(
        "from ft_notebook.magics import snapshots_of\n"
        "print(snapshots_of(get_ipython()).last.bytes_written)"
    )
    assert int(written.check().stdout) < 1_000_000


def test_bad_inputs_get_clear_errors_and_change_nothing(notebook: KernelSession) -> None:
    nb = notebook
    nb.execute("x = 1\n%ft save").check()
    nb.execute("x = 2").check()
    for line, message in [
        ("%ft restore ../../etc", "cannot be used"),
        ("%ft restore nothere", "There is no snapshot 'nothere'"),
        ("%ft restore --vars 1x", "not variable names"),
        ("%ft frobnicate", "unknown subcommand 'frobnicate'"),
        ("%ft auto maybe", "invalid choice"),
        ("%ft plan --mtbf 6x --cost 2s", "invalid duration value: '6x'"),
        ("%ft plan --cost 2s", "needs --mtbf and --cost (or --run RUN); missing: --mtbf"),
        ("%ft plan --mtbf 0s --cost 2s", "mtbf must be a positive number"),
    ]:
        result = nb.execute(line)
        assert result.status == "error", line
        # a typing mistake is a UsageError (no traceback); a missing snapshot keeps its type
        expected = "SnapshotError" if "nothere" in line else "UsageError"
        assert result.error_name == expected, (line, result.error_name)
        assert message in result.error_value, (line, result.error_value)
    assert nb.execute("print(x)").check().stdout.strip() == "2"
    shown = nb.execute("%ft plan --mtbf 6h --cost 5m --restart 10m --rpo 30m").check().stdout
    assert "Daly: τ = √(2δM)·[1 + ⅓√(δ/2M) + ⅑(δ/2M)] − δ = 56.7 min" in shown
    assert "checkpoint every RPO − δ = 25 min" in shown
    help_text = nb.execute("%ft save --help").check().stdout
    assert "%ft save [--vars VARS] [name]" in help_text
    assert "%%ft" not in help_text


def test_restore_refuses_a_store_other_users_can_write(
    notebook: KernelSession, ft_data_dir: Path
) -> None:
    nb = notebook
    nb.execute("y = [1]\n%ft save").check()
    folder = ft_data_dir / "snapshots"
    mode = folder.stat().st_mode
    os.chmod(folder, mode | stat.S_IWOTH)
    try:
        nb.execute("y = [2]").check()
        result = nb.execute("%ft restore")
        assert result.status == "error"
        assert result.error_name == "StoreUnsafe"
        assert "lets other users" in result.error_value
        assert nb.execute("print(y)").check().stdout.strip() == "[2]"
    finally:
        os.chmod(folder, mode)


def test_a_snapshot_killed_halfway_leaves_the_previous_one(
    notebook: KernelSession, ft_data_dir: Path
) -> None:
    """SIGKILL the kernel while it writes a big snapshot: the one before it restores."""
    nb = notebook
    nb.execute("import numpy as np\nsmall = [1, 2, 3]\n%ft save").check()
    blobs = ft_data_dir / "snapshots" / "blobs"
    before = set(blobs.iterdir())
    # ~800 MB of new data: the kernel is still writing when the first new file appears
    nb.send("big = np.random.default_rng(0).random(100_000_000)\n%ft save")
    poll_for(lambda: set(blobs.iterdir()) - before, timeout=120, what="the snapshot to start")
    nb.kill()
    nb.start()
    nb.execute("%load_ext ft_notebook").check()
    out = nb.execute("%ft restore").check().stdout
    assert "restored" in out
    state = nb.execute("print(small, 'big' in globals())").check().stdout.split()
    assert state == ["[1,", "2,", "3]", "False"]
    # the store needs no repair: the next snapshot commits and restores
    nb.execute("small.append(4)\n%ft save").check()
    _restart(nb)
    nb.execute("%ft restore").check()
    assert nb.execute("print(small)").check().stdout.strip() == "[1, 2, 3, 4]"


def test_a_snapshot_holds_values_as_they_were_when_it_was_taken(notebook: KernelSession) -> None:
    nb = notebook
    nb.execute("import numpy as np\nweights = np.zeros(1_000_000)\n%ft save before").check()
    nb.execute("weights += 1  # in place, after the snapshot").check()
    _restart(nb)
    nb.execute("%ft restore before").check()
    assert nb.execute("print(weights.sum())").check().stdout.strip() == "0.0"


def test_next_cell_mutating_while_the_snapshot_is_written_does_not_leak_in(
    notebook: KernelSession, ft_data_dir: Path
) -> None:
    """With auto snapshots the writing goes on while the next cell runs and changes
    the array in place; the snapshot keeps the values at the end of its own cell."""
    from ft_notebook.session import snapshot_store

    nb = notebook
    nb.execute("%ft auto on").check()
    nb.execute("import numpy as np").check()

    def holds_arr() -> bool:  # retention keeps only the newest: watch what it holds
        infos = snapshot_store().list(_key(nb))
        newest = max(infos, key=lambda i: i.step, default=None)
        return newest is not None and "arr" in newest.metadata.get("variables", ())

    # 400 MB: its snapshot is still being written when the next cell starts
    nb.execute("arr = np.random.default_rng(3).random(50_000_000)").check()
    total = nb.execute("print(float(arr.sum()))", silent=True).check().stdout.strip()
    nb.execute("%ft auto off\narr[:] = 0.0").check()
    # not "a newer step than before": the import cell's snapshot, still being written
    # when the step was read, committed after it and let the kernel die too early
    poll_for(holds_arr, timeout=120, what="the background snapshot of arr to commit")
    _restart(nb)
    nb.execute("%ft restore").check()
    assert nb.execute("print(float(arr.sum()))").check().stdout.strip() == total


def _key(nb: KernelSession) -> str:
    return (
        nb.execute(
            "from ft_notebook.magics import snapshots_of\nprint(snapshots_of(get_ipython()).key)",
            silent=True,
        )
        .check()
        .stdout.strip()
    )


def test_a_renamed_notebook_restores_from_its_old_snapshots(
    notebook: KernelSession, tmp_path: Path
) -> None:
    """A kernel started for the renamed file has a new snapshot key: it is told the
    old one and restores from it with --from."""
    notebook.execute("answer = 42\n%ft save").check()
    env = dict(os.environ, JPY_SESSION_NAME=str(tmp_path / "analysis-v2.ipynb"))
    renamed = KernelSession(tmp_path / "kernel2.log", cwd=tmp_path, env=env).start()
    try:
        renamed.execute("%load_ext ft_notebook").check()
        missing = renamed.execute("%ft restore")
        assert missing.error_name == "SnapshotError", missing
        old_key = missing.error_value.split("`%ft restore --from ")[1].split("`")[0]
        assert old_key.startswith("analysis-")
        out = renamed.execute(f"%ft restore --from {old_key}").check()
        assert "restored 1 variables" in out.stdout, out.stdout
        assert renamed.execute("print(answer)").check().stdout.strip() == "42"
    finally:
        renamed.shutdown()


def test_a_notebook_renamed_in_jupyter_restores_its_old_snapshots_by_itself(
    notebook: KernelSession, tmp_path: Path
) -> None:
    """Jupyter told the server extension of the rename, which recorded it: a kernel
    started under the new name restores the old snapshots with a plain `%ft restore`,
    says where they came from, and keeps its own under the new name (dropping the old
    key's latest, now an older state)."""
    from ft_notebook import _renames
    from ft_notebook._notebook_key import notebook_key
    from ft_notebook._paths import data_dir
    from ft_notebook.session import snapshot_store

    notebook.execute("answer = 42\n%ft save").check()
    old, new = (notebook_key(str(tmp_path / n)) for n in ("analysis.ipynb", "final.ipynb"))
    _renames.record(data_dir(), old, new)  # what the server does on Jupyter's rename event
    env = dict(os.environ, JPY_SESSION_NAME=str(tmp_path / "final.ipynb"))
    renamed = KernelSession(tmp_path / "kernel2.log", cwd=tmp_path, env=env).start()
    try:
        listed = renamed.execute("%load_ext ft_notebook\n%ft list").check().stdout
        assert f"before this notebook was renamed (as {old})" in listed, listed
        assert "latest" in listed
        out = renamed.execute("%ft restore").check().stdout
        assert "restored 1 variables" in out, out
        assert f"from its snapshots as {old}, before this notebook was renamed" in out
        assert renamed.execute("print(answer)").check().stdout.strip() == "42"
        renamed.execute("answer = 43\n%ft save").check()
        # the old key's latest was an older state of this notebook: retention dropped it
        assert snapshot_store().list(old) == []
        renamed.kill()
        renamed.start()
        again = renamed.execute("%load_ext ft_notebook\n%ft restore").check().stdout
        assert "renamed" not in again, again  # its own snapshot now
        assert renamed.execute("print(answer)").check().stdout.strip() == "43"
    finally:
        renamed.shutdown()
