"""The training demo asks for a cluster every machine can start: three workers whatever
GPUs it has. It asked for ``workers=3`` alone, which on a GPU server means one worker
per GPU and raises ClusterError unless exactly three GPUs are free."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

from ft_notebook.cluster._resources import GPU, plan_workers, select_gpus

DEMO = Path(__file__).resolve().parents[2] / "demos" / "02_elastic_training.ipynb"


def demo_cluster_arguments() -> dict[str, object]:
    """The keyword arguments of the demo's ``workers = {...}`` line."""
    nb = nbformat.read(DEMO, as_version=4)
    for cell in nb.cells:
        for line in cell.source.splitlines():
            if line.startswith("workers = "):
                value = ast.literal_eval(line.removeprefix("workers = "))
                assert isinstance(value, dict)
                return value
    raise AssertionError("the demo has no `workers = {...}` line")


@pytest.mark.parametrize("gpu_count", [0, 1, 2, 3, 8])
def test_the_demo_cluster_has_three_workers_whatever_the_gpus(gpu_count: int) -> None:
    kwargs = demo_cluster_arguments()
    inventory = [GPU(index=i, uuid=f"GPU-{i}") for i in range(gpu_count)]
    gpus = select_gpus(str(kwargs.get("gpus", "auto")), inventory, None)
    plan = plan_workers(kwargs.get("workers"), gpus, cores=2)  # type: ignore[arg-type]
    assert len(plan.slots) == 3
    assert all(slot.gpu is None for slot in plan.slots)


def test_workers_3_alone_is_refused_on_a_one_gpu_server() -> None:
    """What the demo asked for before: the check above is not vacuous."""
    from ft_notebook.cluster._resources import ClusterError

    gpus = select_gpus("auto", [GPU(index=0, uuid="GPU-0")], None)
    with pytest.raises(ClusterError, match="one worker per GPU"):
        plan_workers(3, gpus, cores=2)
