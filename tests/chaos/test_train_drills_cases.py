"""Named fault cases and the realistic models (a CNN with BatchNorm, a causal
transformer) against real training runs on 3 worker processes: each must end on the
weights of an undisturbed run. The random fault sequences are in
``test_train_drills.py``."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch
from distributed import Client

from ft_notebook.cluster.chaos import kill_worker
from ft_notebook.testing import poll_for
from ft_notebook.testing.training import held_while
from ft_notebook.testing.training_chaos import (
    TOLERANCE,
    DrillModel,
    distance,
    draw_faults,
    drill_problem,
    final_weights,
    reference_weights,
    run_drill,
    wait_for_workers,
)
from ft_notebook.train import Run, epoch_order, fit

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

STEPS = 256  # drill_problem's 12,288 samples in batches of 96, for 2 epochs


@pytest.mark.parametrize(
    ("model", "seed"),
    [("cnn", 9), ("transformer", 2)],  # deterministic: a double kill, then rank 0; default: a kill
)
def test_realistic_models_end_where_the_undisturbed_run_does(
    drill_trio: Client, tmp_path: Path, model: str, seed: int
) -> None:
    """A CNN with BatchNorm, dropout and random augmentation on digits, and a causal
    transformer with dropout on text read from disk, each with an LR schedule,
    gradient clipping and an eval_fn: after random faults, the whole state_dict
    (parameters and buffers) and the evaluation are the undisturbed run's (bit for
    bit when deterministic); every sample counted once per epoch. The drills
    benchmark runs many seeds of both."""
    plan = draw_faults(seed, STEPS)
    wait_for_workers(drill_trio, 3)
    reference = reference_weights(
        drill_trio,
        name=f"reference-{model}",
        store=str(tmp_path / "references"),
        deterministic=plan.deterministic,
        model=model,
        delay_s=0.0,
    )
    result = run_drill(
        drill_trio,
        plan,
        reference,
        name=f"drill-{model}",
        store=str(tmp_path / "drills"),
        model=model,
        delay_s=0.0,
    )
    assert result.struck, result.describe()
    assert result.counted
    assert result.metric.keys() == result.reference_metric.keys() != set()
    assert result.ok, result.describe()


def test_the_two_kills_that_showed_the_divergence_end_on_the_reference(
    drill_trio: Client, tmp_path: Path
) -> None:
    """Issue 17's run, model and all: worker 2 lost at step 27, worker 0 at step 63,
    worker 1 alone to the end. Summed as one float32 slice per rank in the order they
    came, it ended 10% away from the undisturbed run: at step 75 a ReLU input sat
    within rounding of zero for one sample, flipped on 1e-7 of difference, and AdamW
    carried that on. The sums are now the same whatever the world size.

    The faults are placed by steps, not time: a sample of each of those steps takes
    0.5 s to fetch the first time, on a rank that stays, and the kill lands then."""
    # a test before may have killed some: the parts are the first world
    wait_for_workers(drill_trio, 3)
    reference = fit(
        epochs=2,
        cluster=drill_trio,
        name="divergence-reference",
        store=str(tmp_path / "a"),
        checkpoint_every=50,
        wait=True,
        timeout=300,
        **drill_problem(counters=False, delay_s=0.0),
    )
    problem = drill_problem(counters=False, delay_s=0.0)
    order = epoch_order(0, 0, len(problem["data"]))
    at_27 = int(order[27 * 96])  # the first sample of step 27: rank 0's, of 3
    at_63 = int(order[63 * 96 + 95])  # the last of step 63: rank 1's, of 2
    markers = tmp_path / "fetched"
    markers.mkdir()
    problem["data"].slow = {at_27: 0.5, at_63: 0.5}
    problem["data"].slow_once_each = str(markers)
    # the killed workers restart in seconds: held out until the run ends, or on a fast
    # machine worker 2 was back before step 75, and the run was not issue 17's any more
    hold = tmp_path / "hold"
    problem["model"] = functools.partial(held_while, str(hold), problem["model"])
    run = fit(
        epochs=2,
        cluster=drill_trio,
        name="divergence",
        store=str(tmp_path / "b"),
        checkpoint_every=50,
        min_workers=1,
        wait=False,
        **problem,
    )
    poll_for((markers / str(at_27)).exists, timeout=120, what="step 27")
    hold.touch()
    kill_worker(drill_trio, "2")
    poll_for((markers / str(at_63)).exists, timeout=120, what="step 63")
    kill_worker(drill_trio, "0")
    try:
        run.wait(timeout=300)
    finally:
        hold.unlink()
    info = run.info()
    assert [(r["step"], r["workers_after"]) for r in info["recoveries"]] == [(28, 2), (64, 1)]
    assert info["joins"] == [], "a worker rejoined: the drill no longer runs 1 worker at 75"
    gap = distance(final_weights(run), final_weights(reference))
    assert gap <= TOLERANCE, f"{gap:.3g} away from the undisturbed run"


def test_a_run_of_two_workers_that_loses_one_ends_bit_identical(
    drill_trio: Client, tmp_path: Path
) -> None:
    """A run that never has more than two workers sums its two parts in float32, in
    place: one rounding of p0 + p1 whether two ranks all-reduce them or the survivor
    adds them in two backward passes. So a kill must not move a single bit of its
    weights, with ``deterministic=False``."""
    wait_for_workers(drill_trio, 3)

    def pair(name: str, **kw: object) -> Run:
        return fit(
            epochs=2,
            cluster=drill_trio,
            name=name,
            store=str(tmp_path / name),
            checkpoint_every=50,
            max_workers=2,
            min_workers=1,
            **kw,  # type: ignore[arg-type]
        )

    reference = pair("pair-reference", wait=True, timeout=300, **drill_problem(counters=False))
    run = pair("pair", wait=False, **drill_problem(counters=False))
    info = poll_for(
        lambda: (i := run.info())["step"] >= 40 and i["world_size"] == 2 and i,
        timeout=120,
        what="step 40 with two workers",
    )
    kill_worker(drill_trio, str(info["members"][1]))
    run.wait(timeout=300)
    recoveries = run.info()["recoveries"]
    assert recoveries, "the kill struck no member of the run"
    assert min(r["workers_after"] for r in recoveries) == 1
    weights, expected = final_weights(run), final_weights(reference)
    assert all(torch.equal(a, b) for a, b in zip(weights, expected, strict=True)), (
        f"{distance(weights, expected):.3g} away from the undisturbed run"
    )


def _model_drawing_more_on_worker_0(samples: int) -> DrillModel:
    """The drill model, built after one more draw from torch's generator on worker 0:
    what another thread of that worker drawing meanwhile did to its initial weights
    (issue 17, seeds 57 and 97 of 200: a late joiner of the run before built its model
    on the same worker while this run's rank 0 built its own)."""
    from distributed import Worker

    if any(str(w.name) == "0" for w in list(Worker._instances)):
        torch.rand(7)
    return DrillModel(samples)


def test_a_rank_that_built_other_initial_weights_cannot_hand_them_to_the_run(
    drill_trio: Client, drill_references: Mapping[bool, list[torch.Tensor]], tmp_path: Path
) -> None:
    """Rank 0's state used to be everyone's first state, unchecked: its other weights
    trained, verified and COMPLETED 1.77 away from the undisturbed run. The ranks
    compare what their factories built and take what most of them built."""
    wait_for_workers(drill_trio, 3)
    problem = drill_problem()
    problem["model"] = functools.partial(_model_drawing_more_on_worker_0, len(problem["data"]))
    run = fit(
        epochs=2,
        cluster=drill_trio,
        name="other-initial-weights",
        store=str(tmp_path),
        checkpoint_every=16,
        deterministic=True,
        wait=True,
        timeout=300,
        **problem,
    )
    weights = final_weights(run)
    assert all(torch.equal(a, b) for a, b in zip(weights, drill_references[True], strict=True)), (
        f"{distance(weights, drill_references[True]):.3g} away from the undisturbed run"
    )
    repairs = [n for n in run.info()["notes"] if n.get("kind") == "state-repaired"]
    assert [(list(n["workers"]), n["when"]) for n in repairs] == [
        (["0"], "building the initial state")
    ]


class _SlowToBuild(DrillModel):
    """The drill model, with a pause between its layers' draws: two ranks of one
    worker building it at once draw interleaved, unless they take turns."""

    def __init__(self, samples: int) -> None:
        torch.nn.Module.__init__(self)
        self.counts = torch.nn.Parameter(torch.zeros(samples))
        first = torch.nn.Linear(32, 128)
        time.sleep(0.2)
        self.net = torch.nn.Sequential(
            first,
            torch.nn.ReLU(),
            torch.nn.Linear(128, 128),
            torch.nn.ReLU(),
            torch.nn.Linear(128, 4),
        )


def test_two_runs_started_at_once_each_end_where_it_would_alone(
    drill_trio: Client, tmp_path: Path
) -> None:
    """Two runs on one cluster build their models on the same workers at the same
    moment: each must still start from, and end on, the weights it gets alone."""
    wait_for_workers(drill_trio, 3)
    problem = drill_problem(samples=1536, delay_s=0.0)
    problem["model"] = functools.partial(_SlowToBuild, 1536)
    common = dict(epochs=2, cluster=drill_trio, checkpoint_every=8, deterministic=True, **problem)
    alone = final_weights(
        fit(name="alone", store=str(tmp_path / "alone"), wait=True, timeout=300, **common)
    )
    pair = [
        fit(name=f"beside-{i}", store=str(tmp_path / str(i)), wait=False, **common) for i in (0, 1)
    ]
    for run in pair:
        run.wait(timeout=300)
        weights = final_weights(run)
        assert all(torch.equal(a, b) for a, b in zip(weights, alone, strict=True)), (
            f"{run.name}: {distance(weights, alone):.3g} away from the run alone"
        )
