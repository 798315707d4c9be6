"""checkpoint_every="auto": Daly's interval from the run's measured save cost and
step time (issue 20)."""

from __future__ import annotations

import pytest

from ft_notebook.plan import daly_interval
from ft_notebook.train._schedule import FIRST_AUTO_STEP, CheckpointSchedule


def test_a_fixed_interval_is_every_n_steps_whatever_is_measured() -> None:
    s = CheckpointSchedule(50, mtbf_s=3600)
    assert [k for k in range(1, 201) if s.due(k)] == [50, 100, 150, 200]
    assert s.saved(50, stall_s=9.0, step_time_s=0.1) is None
    assert [k for k in range(51, 201) if s.due(k)] == [100, 150, 200]


def test_auto_saves_early_then_every_daly_interval_in_steps() -> None:
    s = CheckpointSchedule(None, mtbf_s=6 * 3600)
    assert [k for k in range(1, FIRST_AUTO_STEP + 1) if s.due(k)] == [FIRST_AUTO_STEP]
    planned = s.saved(FIRST_AUTO_STEP, stall_s=2.0, step_time_s=0.5)
    assert planned is not None
    tau = daly_interval(2.0, 6 * 3600)  # about 293 s
    assert planned.every == round(tau / 0.5)
    assert planned.plan.cost == pytest.approx(2.0)
    assert s.due(FIRST_AUTO_STEP + planned.every)
    assert not s.due(FIRST_AUTO_STEP + planned.every - 1)


def test_auto_follows_the_measured_cost_by_its_median() -> None:
    s = CheckpointSchedule(None, mtbf_s=3600)
    first = s.saved(10, stall_s=0.1, step_time_s=0.05)
    assert first is not None
    for step, stall in ((100, 0.1), (200, 10.0)):  # one slow save: the median holds
        s.saved(step, stall_s=stall, step_time_s=0.05)
    assert s.every == first.every
    for step in (300, 400):  # the store got slower for good: the interval grows
        s.saved(step, stall_s=10.0, step_time_s=0.05)
    assert s.every > 5 * first.every
    assert s.every == max(1, round(daly_interval(10.0, 3600) / 0.05))
