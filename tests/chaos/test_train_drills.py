"""Random fault sequences against real training runs on 3 worker processes: each run
must complete, use every sample exactly once per epoch, end on the weights of an
undisturbed run (bit-identical with ``deterministic=True``, within 1e-4 otherwise)
and name every fault it met. ``benchmarks/bench_drills.py`` runs many
more seeds; these are a few, chosen to cover every kind of fault and both modes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from distributed import Client

from ft_notebook.cluster.chaos import kill_worker
from ft_notebook.testing import poll_for, training_cluster
from ft_notebook.testing.training_chaos import (
    TOLERANCE,
    FaultKind,
    distance,
    draw_faults,
    drill_problem,
    final_weights,
    reference_weights,
    run_drill,
)
from ft_notebook.train import epoch_order, fit

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

STEPS = 256  # drill_problem's 12,288 samples in batches of 96, for 2 epochs
#: Between them: kills of one member, of rank 0 and of two at once, a kill during a
#: recovery, a restarted worker killed while it warms up, hangs; both modes (odd
#: seeds are deterministic).
SEEDS = (0, 5, 6, 10, 12, 16)


@pytest.fixture(scope="module")
def trio() -> Iterator[Client]:
    with training_cluster(3) as client:
        yield client


def all_three(client: Client) -> None:
    poll_for(
        lambda: len(client.scheduler_info(n_workers=-1)["workers"]) == 3,
        timeout=90,
        what="3 workers",
    )


@pytest.fixture(scope="module")
def references(
    trio: Client, tmp_path_factory: pytest.TempPathFactory
) -> dict[bool, list[torch.Tensor]]:
    """The undisturbed run's final weights, by ``deterministic``."""
    store = str(tmp_path_factory.mktemp("references"))
    all_three(trio)
    return {
        d: reference_weights(trio, name=f"reference-{int(d)}", store=store, deterministic=d)
        for d in (False, True)
    }


def test_the_drills_cover_every_kind_of_fault_and_both_modes() -> None:
    plans = [draw_faults(seed, STEPS) for seed in SEEDS]
    kinds = {f.kind for p in plans for f in p.faults}
    assert kinds == set(FaultKind), sorted(set(FaultKind) - kinds)
    assert {p.deterministic for p in plans} == {False, True}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_fault_sequence_ends_where_the_undisturbed_run_does(
    trio: Client, references: dict[bool, list[torch.Tensor]], tmp_path: Path, seed: int
) -> None:
    plan = draw_faults(seed, STEPS)
    result = run_drill(
        trio, plan, references[plan.deterministic], name=f"drill-{seed}", store=str(tmp_path)
    )
    assert result.struck, result.describe()  # the faults landed inside the run
    assert result.counted
    assert result.ok, result.describe()


def test_the_two_kills_that_showed_the_divergence_end_on_the_reference(
    trio: Client, tmp_path: Path
) -> None:
    """Issue 17's run, model and all: worker 2 lost at step 27, worker 0 at step 63,
    worker 1 alone to the end. Summed as one float32 slice per rank in the order they
    came, it ended 10% away from the undisturbed run: at step 75 a ReLU input sat
    within rounding of zero for one sample, flipped on 1e-7 of difference, and AdamW
    carried that on. The sums are now the same whatever the world size.

    The faults are placed by steps, not time: a sample of each of those steps takes
    0.5 s to fetch the first time, on a rank that stays, and the kill lands then."""
    all_three(trio)  # a test before may have killed some: the parts are the first world
    reference = fit(
        epochs=2,
        cluster=trio,
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
    run = fit(
        epochs=2,
        cluster=trio,
        name="divergence",
        store=str(tmp_path / "b"),
        checkpoint_every=50,
        min_workers=1,
        wait=False,
        **problem,
    )
    poll_for((markers / str(at_27)).exists, timeout=120, what="step 27")
    kill_worker(trio, "2")
    poll_for((markers / str(at_63)).exists, timeout=120, what="step 63")
    kill_worker(trio, "0")
    run.wait(timeout=300)
    info = run.info()
    assert [(r["step"], r["workers_after"]) for r in info["recoveries"]] == [(28, 2), (64, 1)]
    # the restarted workers warm up for seconds: the run ends before they are back
    assert info["joins"] == [], "a worker rejoined: the drill no longer runs 1 worker at 75"
    gap = distance(final_weights(run), final_weights(reference))
    assert gap <= TOLERANCE, f"{gap:.3g} away from the undisturbed run"
