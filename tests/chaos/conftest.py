"""The drills' cluster and reference runs, one cluster per test module, so that the
random sequences and the named cases can run side by side in two files; the reference
runs once per test session, whichever module asks first."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import torch
from distributed import Client
from filelock import FileLock

from ft_notebook.testing import training_cluster
from ft_notebook.testing.training_chaos import reference_weights, wait_for_workers


@pytest.fixture(scope="module")
def drill_trio() -> Iterator[Client]:
    with training_cluster(3) as client:
        yield client


class References(Mapping[bool, list[torch.Tensor]]):
    """The undisturbed run's final weights, by ``deterministic``, trained when first
    asked for and kept in a folder every pytest-xdist worker of this session shares:
    the two drill files each trained both (about 30 s of a 2-core suite each), where
    one file needs one of them."""

    def __init__(self, client: Client, shared: Path) -> None:
        self.client, self.shared = client, shared

    def __getitem__(self, deterministic: bool) -> list[torch.Tensor]:
        name = f"reference-{int(deterministic)}"
        kept = self.shared / f"{name}.pt"
        with FileLock(str(kept) + ".lock"):
            if not kept.exists():
                wait_for_workers(self.client, 3)
                store = str(self.shared / f"{name}-store-{os.getpid()}")
                weights = reference_weights(
                    self.client, name=name, store=store, deterministic=deterministic
                )
                torch.save(weights, kept.with_suffix(".tmp"))
                kept.with_suffix(".tmp").replace(kept)  # whole, or not there
        # written by this session's own workers, in its own temporary folder
        weights: list[torch.Tensor] = torch.load(kept, weights_only=True)
        return weights

    def __iter__(self) -> Iterator[bool]:
        return iter((False, True))

    def __len__(self) -> int:
        return 2


@pytest.fixture(scope="module")
def drill_references(drill_trio: Client, tmp_path_factory: pytest.TempPathFactory) -> References:
    base = tmp_path_factory.getbasetemp()
    # under pytest-xdist each worker has its own base, in one folder of this session
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / "drill-references"
    folder.mkdir(exist_ok=True)
    return References(drill_trio, folder)
