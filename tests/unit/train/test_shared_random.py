"""Ranks of one worker process share torch's global random generator: what each of
them draws must not depend on what the others draw at the same time (issue 17: a
rank built other initial weights when a late joiner of the previous run built its
model on the same worker at that moment, and its run ended 1.77 away from the
undisturbed one, verified and COMPLETED)."""

from __future__ import annotations

import threading
import time
from typing import Any

import torch

from ft_notebook.testing.training import regression_problem
from ft_notebook.train.rank._ordered_sum import Parts
from ft_notebook.train.rank._trainer import Trainer
from ft_notebook.train.spec import FitSpec

CPU = torch.device("cpu")


class SlowDropoutNet(torch.nn.Module):
    """Layers built, and dropout masks drawn, with pauses in between: another thread
    that draws meanwhile lands between two of this module's draws."""

    def __init__(self, pause_s: float = 0.0) -> None:
        super().__init__()
        self.pause_s = pause_s
        self.first = torch.nn.Linear(16, 64)
        time.sleep(pause_s)
        self.second = torch.nn.Linear(64, 1)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(torch.relu(self.first(x)))
        time.sleep(self.pause_s)
        return self.second(self.drop(h))


def _spec(pause_s: float, **kw: Any) -> FitSpec:
    problem = regression_problem(size=64, batch=16)
    problem["model"] = lambda: SlowDropoutNet(pause_s)
    return FitSpec(epochs=1, **problem, **kw)


def _weights(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


def _at_once(*jobs: Any) -> list[Any]:
    """Run the jobs in threads started together; their results in order."""
    results: list[Any] = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def run(i: int) -> None:
        start.wait()
        results[i] = jobs[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_two_ranks_building_at_once_build_what_one_builds_alone() -> None:
    spec = _spec(pause_s=0.05)
    alone = _weights(Trainer(spec, CPU))
    pair = _at_once(lambda: Trainer(spec, CPU), lambda: Trainer(spec, CPU))
    for trainer in pair:
        assert all(torch.equal(a, b) for a, b in zip(_weights(trainer), alone, strict=True))


def test_dropout_masks_do_not_depend_on_a_rank_computing_beside_it() -> None:
    spec = _spec(pause_s=0.02, deterministic=True, chunk_size=4)
    alone = _rows(Trainer(spec, CPU).local_gradients(1, 0, 1))
    a, b = Trainer(spec, CPU), Trainer(spec, CPU)
    pair = _at_once(lambda: a.local_gradients(1, 0, 1), lambda: b.local_gradients(1, 0, 1))
    for share in pair:
        rows = _rows(share)
        assert rows.keys() == alone.keys()
        assert all(torch.equal(rows[slot], alone[slot]) for slot in alone)


def _rows(share: Any) -> dict[int, torch.Tensor]:
    """A deterministic step's rows, one per chunk (copies: the last is the trainer's
    gradient buffer)."""
    assert isinstance(share, Parts)
    return {slot: row.clone() for slot, row in share.rows.items()}


def test_a_rank_goes_on_with_its_own_stream_whatever_else_draws() -> None:
    # plain float32 sums seed once and then draw on from where the last step left off
    spec = _spec(pause_s=0.0, ordered_sums=False)
    alone = Trainer(spec, CPU)
    expected = [alone.local_gradients(s, 0, 1).clone() for s in (0, 1)]
    trainer = Trainer(spec, CPU)
    first = trainer.local_gradients(0, 0, 1).clone()
    torch.rand(1000)  # someone else on this process draws in between
    second = trainer.local_gradients(1, 0, 1).clone()
    assert torch.equal(first, expected[0])
    assert torch.equal(second, expected[1])
