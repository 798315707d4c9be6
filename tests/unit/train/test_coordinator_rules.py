"""The coordinator's rules for what rank 0 tells (history, evaluations, lagging saves,
a robust aggregator's suspects), the stall threshold, and collectives that keep
failing with no loss: each driven through the pure ``decide`` (no cluster, no loop)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ft_notebook.events import RunState
from ft_notebook.testing.books import T0, decided, running
from ft_notebook.train.coordinator import _progress_reports
from ft_notebook.train.coordinator._actions import After
from ft_notebook.train.coordinator._book import RunBook, info
from ft_notebook.train.coordinator._inputs import ReformDue, Reported
from ft_notebook.train.coordinator._stall import stall_threshold
from ft_notebook.train.coordinator.decide import decide, start
from ft_notebook.train.protocol import Plan, Report
from ft_notebook.train.spec import RunOptions

pytestmark = pytest.mark.unit


def _told(book: RunBook, r: Report) -> RunBook:
    return decided(book, Reported(r.time, r))[0]


def _progress(step: int, **data: Any) -> Report:
    return Report("r", "cpu0", "progress", 1, step, float(step), {"loss": 1.0, **data})


def test_the_stall_threshold_adapts_to_the_step_time() -> None:
    book, _ = running(1, stall_factor=30, stall_min_s=10, first_steps_floor_s=300)
    assert stall_threshold(book) == 300  # the first steps: the floor
    book = replace(book, progress=replace(book.progress, step_times=(0.1,) * 10))
    assert stall_threshold(book) == 10  # never under stall-min
    book = replace(book, progress=replace(book.progress, step_times=(2.0,) * 10))
    assert stall_threshold(book) == 60  # 30 x the median step
    assert stall_threshold(book) > 10 * 2.0  # a step 10x slower is no hang


def test_a_run_name_used_again_gets_fresh_rendezvous_prefixes() -> None:
    first, second = (start("same", b"", RunOptions(), T0)[0] for _ in range(2))
    plans = [Plan("same", 1, ("a",), ("h", 1), incarnation=b.incarnation) for b in (first, second)]
    assert plans[0].prefix != plans[1].prefix  # old keys in the store are never met
    assert plans[0].prefix.startswith("ft/same/")


def test_evaluations_land_at_their_step_and_the_history_stays_bounded() -> None:
    book, _ = running(1)
    for step in range(1, 11):
        book = _told(book, _progress(step, samples_per_s=10.0))
    late = Report("r", "cpu0", "eval", 1, 10, 99.0, {"eval_step": 4, "eval": {"acc": 0.5}})
    book = _told(book, late)
    [at4] = [p for p in book.progress.history if p["step"] == 4]
    assert (at4["eval"], at4["eval_time"], at4["loss"]) == ({"acc": 0.5}, 99.0, 1.0)
    limit = _progress_reports.HISTORY_MAX
    for step in range(11, 3 * limit):
        book = _told(book, _progress(step))
        if step % 2:  # more evaluations than the history holds
            r = Report("r", "cpu0", "eval", 1, step, float(step), {"eval_step": step})
            book = _told(book, r)
    history = book.progress.history
    assert len(history) <= limit
    steps = [p["step"] for p in history]
    assert steps == sorted(steps)
    progress = [p["step"] for p in history if "eval_time" not in p]
    assert max(progress) > 2 * limit  # the loss curve goes on
    assert max(p["step"] for p in history if "eval_time" in p) == 3 * limit - 1


def test_rank_zero_saying_its_checkpoints_lag_shows_on_the_run() -> None:
    book, _ = running(1)
    book = _told(book, _progress(1, lagging=True))
    assert book.noted.lagging
    book = _told(book, _progress(2, lagging=False))
    assert not book.noted.lagging


@pytest.mark.parametrize("joiner", [False, True])
def test_collectives_failing_with_no_loss_fail_the_run_once_its_step_stands_still(
    joiner: bool,
) -> None:
    """A broken interconnect: every collective fails, no worker is lost, and nothing
    names a member that cannot meet the others, so none is evicted (a guess would take
    healthy workers out one by one). The run forms the same members again while steps
    advance, and fails, saying why, once its step has stood still for the stall
    threshold, instead of re-forming for ever. With a joiner, half the failures come
    from a rank with no state yet (step -1): they tell nothing of progress and must not
    start the count again."""
    book, _ = running(2, first_steps_floor_s=1.0)
    clock = T0

    def fail_a_collective(book: RunBook, step: int) -> RunBook:
        """Rank 0 reports a failed collective at ``step``; the grace passes."""
        nonlocal clock
        plan = book.plan
        assert plan is not None
        data = {"error": "Connection reset by peer", "plan": plan.gen}
        r = Report("r", "cpu0", "peer-failed", plan.gen, step, clock, data)
        book, actions = decide(book, Reported(clock, r))
        [timer] = [a for a in actions if isinstance(a, After)]
        clock += timer.delay_s
        due = timer.input
        assert isinstance(due, ReformDue)
        book, _ = decide(book, replace(due, now=clock))
        assert book.finished or book.plan is not plan, "no new plan after a failed collective"
        return book

    for step in range(1, 6):  # steps advance between the failures: it goes on
        book = _told(book, _progress(step))
        book = fail_a_collective(book, step)
        assert not book.finished
        assert book.training == ("cpu0", "cpu1")
    first_at_5, more = clock, 0
    while not book.finished and clock - first_at_5 < 10:
        book, more = fail_a_collective(book, -1 if joiner and more % 2 == 0 else 5), more + 1
    assert clock - first_at_5 >= 1.0  # the threshold (1 s) from the first re-form at step 5
    assert more >= 2  # and three failures at the step at least
    assert book.state is RunState.FAILED
    assert f"failed {more + 1} times in a row at step 5" in book.reason
    assert "Connection reset by peer" in book.reason
    assert "no member could be evicted" in book.reason
    assert "resume=True" in book.reason
    assert book.members.evicted == {}
    assert book.plan is not None
    assert book.plan.stop == "failed"


def test_the_suspects_of_the_steps_after_the_last_progress_report_count_too() -> None:
    """Rank 0 tells a robust aggregator's suspects with each progress report (4 a
    second) and, for the steps after the last one, with ``done``: a run's totals must
    not depend on where its last progress report fell (the robust run's test lost up
    to a third of its steps that way under load)."""
    book, _ = running(1)
    book = _told(book, _progress(40, suspects={"3": 38}, mean_steps=2))
    done = Report("r", "cpu0", "done", 1, 72, 1.0, {"suspects": {"3": 30}, "mean_steps": 1})
    book = _told(book, done)
    said = info(book)
    assert said["state"] == "COMPLETED"
    assert said["suspects"] == {"3": 68}
    assert said["mean_steps"] == 3
