"""Friction a person met trying the README and the demos (issue 38), each on real parts:
a service whose model cannot be built is not left registered, a drill is journalled
as one (so the MTBF a run plans with does not count it), and in a real kernel
``ft.down`` closes the kernel's clients of that cluster, which otherwise log
``Failed to reconnect to scheduler`` under some later cell, and asking again for a
cluster left running as it is says nothing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import ft_notebook as ft
from ft_notebook.testing import KernelSession

pytestmark = pytest.mark.integration


def broken_factory() -> Any:
    raise FileNotFoundError("model.pt")


def test_a_service_that_never_came_up_is_not_left_registered(client: Any) -> None:
    for _ in range(2):  # the name is free again: the same error, not "already runs"
        with pytest.raises(ft.ServeError, match="could not be built on any worker") as caught:
            ft.serve(broken_factory, name="never-up", cluster=client, replicas=2)
        assert "serve() closed it again, so its name is free" in str(caught.value)
        assert "never-up" not in [s["name"] for s in ft.services(cluster=client)]


def test_a_drill_is_journalled_as_one_before_its_signal(client: Any) -> None:
    from ft_notebook.cluster.chaos import kill_worker
    from ft_notebook.events import cluster_topic, history

    done = kill_worker(client, "random")
    notes = [e for e in history(cluster_topic()) if e.kind == "published"]
    assert [(e.data["drill"], e.data["name"], e.worker) for e in notes][-1:] == [
        ("SIGKILL", done.worker, done.worker)
    ]


def test_down_closes_the_kernel_s_clients_and_a_cluster_as_asked_is_reused_quietly(
    tmp_path: Path,
) -> None:
    env = dict(os.environ, DASK_FT_NOTEBOOK__DATA_DIR=str(tmp_path / "data"))
    kernel = KernelSession(tmp_path / "kernel.log", cwd=tmp_path, env=env).start()
    try:
        kernel.execute(
            "import warnings\nimport ft_notebook as ft\n"
            "client = ft.cluster(name='friction', workers=1)\n"
            "side = ft.cluster(name='friction', set_as_default=False)",
            timeout=180,
        ).check()
        quiet = kernel.execute(
            "with warnings.catch_warnings(record=True) as seen:\n"
            "    warnings.simplefilter('always')\n"
            "    again = ft.cluster(name='friction', workers=1)\n"
            "    told = ft.cluster(name='friction', workers=2)\n"
            "print([str(w.message) for w in seen])"
        ).check()
        # the one asked for as it runs says nothing; the other names the difference
        [said] = eval(quiet.stdout)
        assert said.startswith("Cluster 'friction' is already running, so workers=2 was not used")
        assert "(it has 1)" in said
        closed = kernel.execute(
            "print(ft.down('friction'), client.status, side.status, again.status)"
        ).check()
        # a closed client does not try to reconnect, so it never logs that it failed to
        assert closed.stdout.split() == ["True", "closed", "closed", "closed"]
    finally:
        kernel.execute("print([ft.down(c.name) for c in ft.clusters()])", timeout=60)
        kernel.shutdown()
    assert "Failed to reconnect" not in (tmp_path / "kernel.log").read_text()


def test_a_run_resumed_from_its_final_checkpoint_reports_its_last_loss(
    client: Any, tmp_path: Path, unique_name: str
) -> None:
    """Demo 02, paused a while before ``ft.down``: the run had ended, ``resume=True``
    found its final checkpoint with nothing left to train, and the run said loss None
    (the demo's ``info["loss"] < 0.5`` raised TypeError)."""
    from ft_notebook.testing.training import counting_problem

    problem = counting_problem(size=64, batch=16)
    first = ft.fit(
        epochs=2, cluster=client, name=unique_name, store=str(tmp_path), timeout=120, **problem
    ).info()
    assert first["state"] == "COMPLETED", first
    assert isinstance(first["loss"], float), first
    again = ft.fit(
        epochs=2,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        resume=True,
        timeout=120,
        **problem,
    ).info()
    assert again["state"] == "COMPLETED", again
    assert again["resumed_from"] == again["step"] == first["step"] == 8
    assert again["loss"] == first["loss"]  # the last committed step's, read back


def test_notebook_friction_in_a_real_kernel(tmp_path: Path) -> None:
    """The README's own steps in one kernel: the cluster's ``client`` is said once to be
    a live connection (not "NOT protected ... cannot pickle '_asyncio.Task'" at every
    save), ``%ft list`` shows ``latest`` once, and a failing ``%%ft checkpoint`` cell's
    traceback shows the user's failing line, not the library's."""
    env = dict(os.environ, DASK_FT_NOTEBOOK__DATA_DIR=str(tmp_path / "data"))
    kernel = KernelSession(tmp_path / "kernel.log", cwd=tmp_path, env=env).start()
    said = ""
    try:
        cells = [
            "%load_ext ft_notebook\nimport ft_notebook as ft\nx = [1]",
            "client = ft.cluster(name='friction-ns', workers=1)",
            "%ft save",
            "y = 2",
            "%ft save",
            "%ft auto on",
            "x.append(3)",
            "%ft save kept",
            "z = 3",
        ]
        for code in cells:
            result = kernel.execute(code, timeout=180).check()
            said += result.stdout + result.stderr
        assert said.count("client: a live connection to the Dask scheduler") == 1, said
        assert "reconnect with `client = ft.cluster()`" in said
        assert "NOT protected" not in said, said
        assert "_asyncio" not in said
        # an auto snapshot commits in the background while the next cell runs: wait for it
        kernel.execute(
            "__import__('ft_notebook.magics').magics.snapshots_of(get_ipython()).session.wait()"
        ).check()
        listing = kernel.execute("%ft list").check().stdout.splitlines()[1:]
        assert sorted(row.split()[0] for row in listing) == ["kept", "latest"], listing
        assert listing[-1].split()[0] == "latest"
        assert listing[-1].endswith("x, y, z"), listing  # the newest latest, with z
        failed = kernel.execute(
            "%%ft checkpoint\nx.append(4)\ndef load():\n    return {}['rows']\nrows = load()"
        )
        assert failed.error_name == "KeyError", failed
        assert "return {}['rows']" in failed.traceback, failed.traceback
        assert "rows = load()" in failed.traceback
        assert "Could not get source" not in failed.traceback
        assert "ft_notebook/" not in failed.traceback, failed.traceback
        assert kernel.execute("print(x)").check().stdout.strip() == "[1, 3]"  # rolled back
    finally:
        kernel.execute("print(ft.down('friction-ns'))", timeout=60)
        kernel.shutdown()
