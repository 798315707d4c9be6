"""User mistakes at the entry points are clear errors, raised before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ft_notebook.cluster import attach, cluster
from ft_notebook.exceptions import ClusterError, UnsafeName


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"workers": 0}, ClusterError, "workers=0 must be a whole number"),
        ({"idle_timeout": "soon"}, ClusterError, "idle_timeout='soon' is not a positive"),
        ({"idle_timeout": -1}, ClusterError, "not a positive duration"),
        ({"gpus": 1.5}, ClusterError, r"gpus=1.5 names no GPUs.*gpus=\[0, 2\]"),
        ({"name": "../../etc"}, UnsafeName, "cluster name"),
    ],
)
def test_bad_arguments_are_refused_before_starting(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        cluster(set_as_default=False, **kwargs)  # type: ignore[arg-type]


def test_attach_says_what_it_accepts(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="takes a Client, a scheduler address"):
        attach(42)
    with pytest.raises(ClusterError, match="neither a scheduler address"):
        attach("no-such-cluster")
    bad = tmp_path / "scheduler.json"
    bad.write_text("{}")
    with pytest.raises(ClusterError, match="is not a Dask scheduler file"):
        attach(bad)


def test_importing_the_cluster_package_loads_neither_dask_nor_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, ft_notebook.cluster, ft_notebook.cluster.chaos\n"
        "print(sorted(m for m in ('torch', 'dask', 'distributed') if m in sys.modules))\n"
        "import ft_notebook.cluster.plugins\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "False"]  # plugins: Dask, still no torch
