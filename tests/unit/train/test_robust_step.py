"""A robust aggregator inside the training step: each rank's own mean gradient in its
own row, gathered exactly, the rule applied alike on every rank; a worker turned bad
sends its attack instead (issue 20)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from ft_notebook.exceptions import TrainingError
from ft_notebook.robust import aggregator
from ft_notebook.testing.training import regression_problem
from ft_notebook.train._robust import rule_of, smallest_world, turn_bad, turn_good
from ft_notebook.train._sharding import split
from ft_notebook.train.rank._ordered_sum import Parts
from ft_notebook.train.rank._trainer import Trainer
from ft_notebook.train.spec import FitSpec

CPU = torch.device("cpu")
WORLD = 3


@pytest.fixture(autouse=True)
def honest_again() -> Iterator[None]:
    yield
    turn_good()


def _spec(rule: Any, **kw: Any) -> FitSpec:
    return FitSpec(
        epochs=1, aggregator=rule_of(rule), **regression_problem(size=384, batch=192), **kw
    )


def _gathered(
    spec: FitSpec, step: int, bad: int | None = None, attack: str = "sign-flip", **params: float
) -> tuple[Trainer, torch.Tensor]:
    trainers = [Trainer(spec, CPU) for _ in range(WORLD)]
    rows = []
    for rank, t in enumerate(trainers):
        if rank == bad:
            turn_bad(attack, **params)
        rows.append(t.local_gradients(step, rank, WORLD))
        turn_good()
    return trainers[0], sum(rows)  # what the SUM all-reduce of zero-padded rows gives


def _own_gradient(spec: FitSpec, step: int, rank: int) -> torch.Tensor:
    """Rank ``rank``'s mean gradient over its slice, by plain autograd on a fresh model."""
    t = Trainer(spec, CPU)
    indices = t.step_indices(step)
    lo, hi = split(len(indices), WORLD)[rank]
    t.model.zero_grad()
    t.loss_of(t.batch(indices[lo:hi])).backward()
    return torch.cat([p.grad.reshape(-1) for p in t.params]).double()


def test_every_rank_applies_the_rule_to_every_rank_s_own_gradient() -> None:
    spec = _spec("median")
    trainer, rows = _gathered(spec, step=1)
    own = torch.stack([_own_gradient(spec, 1, r) for r in range(WORLD)])
    assert torch.allclose(rows[:, :-1], own, rtol=1e-6, atol=1e-9)
    total = trainer.reduce_rows(rows)
    assert torch.equal(total[:-1], rows[:, :-1].median(dim=0).values)  # n = 3: the middle
    assert trainer.aggregated.held


def test_a_bad_worker_is_bounded_by_the_median_and_named_but_moves_the_mean() -> None:
    honest = _gathered(_spec("median"), step=2)[1][:, :-1]
    trainer, rows = _gathered(_spec("median"), step=2, bad=2)
    assert torch.allclose(rows[2, :-1], -4 * honest[2])  # sign flip, four times as long
    total = trainer.reduce_rows(rows)
    lo, hi = honest.min(dim=0).values, honest.max(dim=0).values
    assert bool(((total[:-1] >= lo - 1e-12) & (total[:-1] <= hi + 1e-12)).all())
    assert trainer.aggregated.suspects == (2,)
    mean = rows[:, :-1].mean(dim=0)
    assert float(torch.nn.functional.cosine_similarity(mean, honest.mean(dim=0), dim=0)) < 0


@pytest.mark.parametrize("rule", ["median", "centered-clipping"])
def test_a_bad_worker_running_alie_or_ipm_sends_it_from_the_honest_gradients_of_the_step(
    rule: str,
) -> None:
    """ALIE and IPM know the honest gradients: the bad rank computes the others' slices
    itself. The reference: each honest rank's gradient by plain autograd on a fresh model."""
    spec = _spec(rule)
    honest = torch.stack([_own_gradient(spec, 2, r) for r in (0, 2)])
    _, rows = _gathered(spec, step=2, bad=1, attack="alie", z=1.5)
    alie = honest.mean(dim=0) - 1.5 * honest.std(dim=0)
    assert torch.allclose(rows[1, :-1], alie, rtol=1e-5, atol=1e-7)
    assert torch.allclose(rows[[0, 2], :-1], honest, rtol=1e-6, atol=1e-9)  # the others: honest
    _, rows = _gathered(spec, step=2, bad=1, attack="ipm", epsilon=0.5)
    assert torch.allclose(rows[1, :-1], -0.5 * honest.mean(dim=0), rtol=1e-5, atol=1e-7)


def test_alie_under_the_mean_replaces_the_bad_rank_s_share_of_the_sum() -> None:
    """Under the mean the buffers are summed, each rank's weighted by its samples'
    share: the bad rank's part is its share of the ALIE vector."""
    spec = _spec("mean")
    honest = torch.stack([_own_gradient(spec, 1, r) for r in (0, 2)])
    t = Trainer(spec, CPU)
    turn_bad("alie", z=1.5)
    share_sent = t.local_gradients(1, 1, WORLD)  # rank 1 of 3 holds part 1 of 3
    assert isinstance(share_sent, Parts)
    sent = share_sent.rows[1].clone()
    turn_good()
    lo, hi = split(len(t.step_indices(1)), WORLD)[1]
    share = (hi - lo) / len(t.step_indices(1))
    alie = honest.mean(dim=0) - 1.5 * honest.std(dim=0)
    assert torch.allclose(sent[:-1].double(), share * alie, rtol=1e-4, atol=1e-7)


def test_a_worker_alone_with_alie_has_no_one_to_imitate_and_sends_its_own() -> None:
    spec = _spec("mean")
    t = Trainer(spec, CPU)
    own = t.local_gradients(0, 0, 1).clone()
    turn_bad("alie")
    assert torch.equal(Trainer(spec, CPU).local_gradients(0, 0, 1), own)


def test_too_few_workers_for_the_rule_stall_or_fall_back_to_the_mean_as_asked() -> None:
    krum = aggregator("krum", f=1)
    assert smallest_world(krum) == 5
    trainer, rows = _gathered(_spec(krum, on_violation="mean"), step=0)
    total = trainer.reduce_rows(rows)
    assert not trainer.aggregated.held
    assert torch.allclose(total[:-1], rows[:, :-1].mean(dim=0))
    trainer, rows = _gathered(_spec(krum, on_violation="stall"), step=0)
    with pytest.raises(TrainingError, match=r"krum with f=1 needs n >= 2f \+ 3, but 3 workers"):
        trainer.reduce_rows(rows)


def test_the_mean_by_name_or_rule_keeps_the_all_reduce_and_a_bad_name_says_which() -> None:
    assert rule_of("mean") is None
    assert rule_of(aggregator("mean")) is None
    assert rule_of("median").f == 1
    with pytest.raises(TrainingError, match=r"'medain'.*known: mean, median"):
        rule_of("medain")
    with pytest.raises(TrainingError, match="takes a rule's name"):
        rule_of(3)
