"""Checkpoint planning against the published numbers and its own model."""

from __future__ import annotations

import math

import pytest

from ft_notebook.exceptions import PlanError
from ft_notebook.plan import (
    daly_interval,
    measured_beside,
    parse_duration,
    plan,
    waste,
    young_interval,
)

MIN = 60.0


@pytest.mark.parametrize(("mtbf_min", "expected_min"), [(24 * 60, 117), (6 * 60, 57), (15, 9.1)])
def test_dalys_published_examples(mtbf_min: float, expected_min: float) -> None:
    # Daly 2006, section 5: a 5-minute dump and a 10-minute restart
    tau = daly_interval(5 * MIN, mtbf_min * MIN) / MIN
    assert tau == pytest.approx(expected_min, abs=0.5 if expected_min > 10 else 0.05)


def test_a_save_costing_twice_the_mtbf_or_more_checkpoints_every_mtbf() -> None:
    assert daly_interval(100.0, 50.0) == 50.0
    assert daly_interval(100.0, 49.0) == 49.0
    assert daly_interval(99.0, 50.0) != 50.0  # just below: the formula


def test_young_is_the_first_order_term() -> None:
    assert young_interval(2.0, 6 * 3600) == pytest.approx(math.sqrt(2 * 2 * 6 * 3600))
    # for a cheap save the two agree to first order
    assert daly_interval(1.0, 1e6) == pytest.approx(young_interval(1.0, 1e6), rel=1e-2)


@pytest.mark.parametrize(
    ("cost", "mtbf", "restart"), [(2.0, 6 * 3600, 30.0), (300.0, 900.0, 600.0)]
)
def test_dalys_interval_wastes_least(cost: float, mtbf: float, restart: float) -> None:
    best = daly_interval(cost, mtbf)
    at = waste(best, cost, mtbf, restart)
    assert 0 < at < 1
    assert at < waste(best / 2, cost, mtbf, restart)
    assert at < waste(best * 2, cost, mtbf, restart)
    # the true minimum of the model is within a few percent of Daly's estimate
    grid = [best * (0.5 + i / 100) for i in range(101)]
    argmin = min(grid, key=lambda t: waste(t, cost, mtbf, restart))
    assert argmin == pytest.approx(best, rel=0.05)


def test_a_tight_rpo_shortens_the_interval_and_says_what_it_costs() -> None:
    loose = plan(6 * 3600, 2.0, 30.0, rpo=3600, rto=60)
    assert loose.interval == loose.daly
    assert loose.rpo_met
    assert loose.rto_met
    tight = plan(6 * 3600, 2.0, 30.0, rpo=2 * MIN, rto=10)  # Daly: 293 s
    assert tight.interval == pytest.approx(2 * MIN - 2.0)
    assert tight.worst_loss == pytest.approx(2 * MIN)
    assert tight.waste > loose.waste
    assert tight.rpo_met
    assert tight.rto_met is False
    text = "\n".join(tight.explain())
    assert "checkpoint every RPO − δ = 118 s" in text
    assert "RTO 10 s: a restart takes 30 s: NOT met" in text
    impossible = plan(3600, 120.0, rpo=60.0)
    assert impossible.rpo_met is False
    assert "NOT met: a save alone costs more than the RPO" in "\n".join(impossible.explain())


def test_the_explanation_shows_the_formulas_with_their_numbers() -> None:
    text = "\n".join(plan(6 * 3600, 5 * MIN).explain())
    assert "Young: τ = √(2δM) = √(2·300·21600) s = 60 min" in text
    assert "Daly: τ = √(2δM)·[1 + ⅓√(δ/2M) + ⅑(δ/2M)] − δ = 56.7 min" in text


def test_each_measured_recovery_is_set_beside_the_targets_or_the_plan() -> None:
    recoveries = [
        {"step": 40, "cause": "2: process gone", "rto_s": 0.8, "steps_lost": 0},
        {"step": 90, "cause": "1: hung", "rto_s": 45.0, "steps_lost": 300},
    ]
    with_targets = plan(6 * 3600, 2.0, 1.0, rpo=5 * MIN, rto=30.0)
    first, second = measured_beside(with_targets, recoveries, step_time_s=0.5)
    assert first == (
        "recovery at step 40 (2: process gone): took 800 ms, within RTO 30 s; "
        "0 steps lost (0 ms of work), within RPO 5 min"
    )
    # 45 s > the 30 s RTO; 300 steps of 0.5 s = 150 s, within the 5-minute RPO
    assert "took 45 s, OVER RTO 30 s; 300 steps lost (2.5 min of work), within RPO" in second
    # no targets: the plan's own R and worst case τ + δ are the yardsticks
    bare = plan(60.0, 1.0, 2.0)
    (line,) = measured_beside(bare, recoveries[1:], step_time_s=None)
    assert f"OVER R 2 s; 300 steps lost, ? τ + δ {bare.worst_loss:.3g} s" in line
    assert measured_beside(bare, [], 0.5) == [
        "no recoveries measured yet: nothing to set beside the plan"
    ]


def test_expected_loss_is_about_half_a_segment_when_failures_are_rare() -> None:
    made = plan(1e7, 10.0)
    assert made.expected_loss == pytest.approx((made.interval + 10.0) / 2, rel=1e-3)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("6h", 21600.0),
        ("2s", 2.0),
        ("10m", 600.0),
        ("10min", 600.0),
        ("1.5d", 129600.0),
        ("250ms", 0.25),
        ("30", 30.0),
        (" 2 h ", 7200.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "6x", "h", "-2s", "1e3s"])
def test_bad_durations_say_how_to_write_one(text: str) -> None:
    with pytest.raises(PlanError, match="write a number and a unit"):
        parse_duration(text)


def test_impossible_inputs_are_refused() -> None:
    with pytest.raises(PlanError, match="mtbf must be a positive number"):
        plan(0.0, 2.0)
    with pytest.raises(PlanError, match="cost must be a positive number"):
        plan(3600.0, -1.0)
    with pytest.raises(PlanError, match="rpo must be zero or more"):
        plan(3600.0, 1.0, rpo=-5.0)


def test_durations_with_their_units_are_taken_as_the_magic_takes_them() -> None:
    """`plan.plan('6h', ...)` raised: it took seconds only (issue 38)."""
    assert plan("6h", "5m", "10m", rpo="30m", rto="90s") == plan(
        21600.0, 300.0, 600.0, rpo=1800.0, rto=90.0
    )
    assert plan("6h", 300).interval == pytest.approx(plan(21600, 300.0).interval)
    with pytest.raises(PlanError, match="'6 hours' is not a duration"):
        plan("6 hours", "5m")
