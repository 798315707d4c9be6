"""BatchNorm statistics end where a failure-free run ends them: the ranks of a world
are driven in this process, each step's gradient buffers and statistics tables summed
as the all-reduce sums them, and the buffers compared bit for bit across world sizes
and across ranks. A run that loses a worker mid-way is a change of world size between
two steps: the buffers must not notice."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from ft_notebook.exceptions import TrainingError
from ft_notebook.train.rank._batch_stats import BufferChangedInForward
from ft_notebook.train.rank._ordered_sum import Parts, in_process_sum
from ft_notebook.train.rank._trainer import Trainer
from ft_notebook.train.spec import FitSpec

pytestmark = pytest.mark.unit

CPU = torch.device("cpu")


def _bn_mlp() -> torch.nn.Module:
    """The issue's model: 8-16-2 with one BatchNorm1d."""
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
    )


def _bn_cnn() -> torch.nn.Module:
    """BatchNorm2d (statistics over batch and pixels) and a cumulative-average layer."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 6 * 6, 8),
        torch.nn.BatchNorm1d(8, momentum=None),
        torch.nn.Linear(8, 2),
    )


def _problem(model: Any, shape: tuple[int, ...], size: int = 96) -> dict[str, Any]:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(size, *shape, generator=g) * 3 + 1
    y = torch.randint(0, 2, (size,), generator=g)
    return {
        "model": model,
        "data": torch.utils.data.TensorDataset(x, y),
        "optimizer": functools.partial(torch.optim.SGD, lr=0.1),
        "loss": torch.nn.functional.cross_entropy,
        "batch_size": 24,
    }


def _train(spec: FitSpec, worlds: list[int], parts: int = 0) -> list[Trainer]:
    """Train one step per entry of ``worlds`` with that many ranks, the ranks that
    survive a smaller world carrying on (the last ones are the lost ones). Returns the
    trainers of the last world."""
    trainers = [Trainer(spec, CPU) for _ in range(max(worlds))]
    for step, world in enumerate(worlds):
        alive = trainers[:world]
        shares = [t.local_gradients(step, r, world, parts) for r, t in enumerate(alive)]
        if isinstance(shares[0], Parts):  # folded in part order, as the slices' owners do
            total = in_process_sum(shares)
        else:
            total = alive[0].reduce_rows(sum(s.clone() for s in shares))
        table = None if alive[0].stats_table is None else sum(t.stats_table for t in alive)
        for t in alive:
            t.apply(total.clone(), None if table is None else table.clone())
    return trainers[: worlds[-1]]


def _buffers(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.model.named_buffers()}


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), (k, (a[k] - b[k]).abs().max())


@pytest.mark.parametrize("mode", ["deterministic", "ordered-sums"])
@pytest.mark.parametrize(("model", "shape"), [(_bn_mlp, (8,)), (_bn_cnn, (1, 6, 6))])
def test_a_lost_worker_changes_no_batchnorm_statistic(mode: str, model: Any, shape: Any) -> None:
    options = {"deterministic": True} if mode == "deterministic" else {}
    spec = FitSpec(epochs=2, **_problem(model, shape), **options)
    clean = _train(spec, [3] * 8, parts=3)
    faulty = _train(spec, [3] * 3 + [2] * 5, parts=3)  # the last rank lost at step 3
    reference = _buffers(clean[0])
    for t in clean[1:] + faulty:  # every rank of both runs holds the same statistics
        _assert_same(reference, _buffers(t))
    parts = clean[0].slot_count(24, 3, 3)  # chunks (deterministic) or parts
    assert int(reference["1.num_batches_tracked"]) == 8 * parts  # one update per part
    for a, b in zip(clean[0].model.parameters(), faulty[0].model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_statistics_are_those_of_the_parts_in_order_on_one_process() -> None:
    """One rank computing every part gives the momentum updates of the parts' own
    batches, which torch's own BatchNorm gives too (to float32 rounding)."""
    spec = FitSpec(epochs=1, deterministic=True, chunk_size=8, **_problem(_bn_mlp, (8,)))
    (trainer,) = _train(spec, [1])
    first = Trainer(spec, CPU)  # the initial state, and torch's BatchNorm to compare
    bn = first.model[1]
    x, _ = first.batch(first.step_indices(0))
    with torch.no_grad():
        hidden = first.model[0](x)
        for lo in range(0, 24, 8):  # the three chunks, in order
            bn(hidden[lo : lo + 8])
    got = trainer.model[1]
    assert int(got.num_batches_tracked) == 3
    torch.testing.assert_close(got.running_mean, bn.running_mean)
    torch.testing.assert_close(got.running_var, bn.running_var)


def test_a_frozen_batchnorm_in_eval_mode_keeps_its_statistics() -> None:
    def frozen() -> torch.nn.Module:
        model = _bn_mlp()
        model[1].eval()  # a fine-tuning habit: BatchNorm frozen, the rest trained
        return model

    spec = FitSpec(epochs=1, **_problem(frozen, (8,)))
    before = _buffers(Trainer(spec, CPU))
    (trainer, *_) = _train(spec, [3, 2], parts=3)
    _assert_same(before, _buffers(trainer))


def test_a_module_that_changes_another_buffer_in_forward_is_refused_by_name() -> None:
    class Counter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("seen", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.seen += len(x)
            return x

    def model() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(8, 8), Counter(), torch.nn.Linear(8, 2))

    spec = FitSpec(epochs=1, **_problem(model, (8,)))
    with pytest.raises(BufferChangedInForward, match=r"'1' \(Counter\) changed its buffer 'seen'"):
        _train(spec, [2])


def test_a_batchnorm_layer_called_twice_in_a_pass_is_refused() -> None:
    class Twice(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.bn = torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bn(self.fc(self.bn(x)))[:, :2]

    spec = FitSpec(epochs=1, **_problem(Twice, (8,)))
    trainer = Trainer(spec, CPU)
    with pytest.raises(TrainingError, match="'bn' ran twice in one forward pass"):
        trainer.local_gradients(0, 0, 1)
    # the statistics were hidden for the pass and are back, untouched
    assert torch.equal(trainer.model.bn.running_mean, torch.zeros(8))
    assert int(trainer.model.bn.num_batches_tracked) == 0


def test_the_self_check_tells_states_apart_by_their_buffers() -> None:
    """Two ranks equal in every parameter but one running statistic do not agree."""
    from ft_notebook.train.rank._verify import fingerprint, sampled_fingerprint

    spec = FitSpec(epochs=1, **_problem(_bn_mlp, (8,)))
    a, b = Trainer(spec, CPU), Trainer(spec, CPU)
    assert torch.equal(fingerprint(a), fingerprint(b))
    b.model[1].running_var[3] += 0.41
    assert not torch.equal(fingerprint(a), fingerprint(b))
    assert not torch.equal(sampled_fingerprint(a), sampled_fingerprint(b))


class _Jittered(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Random augmentation inside the dataset: noise drawn from torch's generator."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i] + 0.1 * torch.randn(self.x.shape[1:]), self.y[i]


def _dropout_bn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16),
        torch.nn.BatchNorm1d(16),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.3),
        torch.nn.Linear(16, 2),
    )


@pytest.mark.parametrize("mode", ["deterministic", "ordered-sums"])
def test_dropout_and_random_augmentation_draw_the_same_after_a_lost_worker(mode: str) -> None:
    options = {"deterministic": True} if mode == "deterministic" else {}
    problem = _problem(_dropout_bn, (8,))
    x, y = problem["data"].tensors
    problem["data"] = _Jittered(x, y)
    spec = FitSpec(epochs=2, **problem, **options)
    clean = _train(spec, [3] * 8, parts=3)
    faulty = _train(spec, [3] * 2 + [2] * 3 + [1] * 3, parts=3)  # a double kill
    a, b = clean[0].model.state_dict(), faulty[0].model.state_dict()
    for k in a:
        assert torch.equal(a[k], b[k]), k
