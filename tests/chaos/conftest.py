"""The drills' cluster and reference runs, one of each per test module, so that the
random sequences and the named cases can run side by side in two files."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from distributed import Client

from ft_notebook.testing import training_cluster
from ft_notebook.testing.training_chaos import reference_weights, wait_for_workers


@pytest.fixture(scope="module")
def drill_trio() -> Iterator[Client]:
    with training_cluster(3) as client:
        yield client


@pytest.fixture(scope="module")
def drill_references(
    drill_trio: Client, tmp_path_factory: pytest.TempPathFactory
) -> dict[bool, list[torch.Tensor]]:
    """The undisturbed run's final weights, by ``deterministic``."""
    store = str(tmp_path_factory.mktemp("references"))
    wait_for_workers(drill_trio, 3)
    return {
        d: reference_weights(drill_trio, name=f"reference-{int(d)}", store=store, deterministic=d)
        for d in (False, True)
    }
