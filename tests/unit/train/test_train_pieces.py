"""The pieces of ft.fit that need no cluster: wire messages, the step arithmetic,
interruptible waits on real gloo groups, the stall threshold, spec checks."""

from __future__ import annotations

import datetime
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from ft_notebook.exceptions import TrainingError
from ft_notebook.testing import poll_for
from ft_notebook.testing.training import counting_problem, regression_problem
from ft_notebook.train.protocol import Plan, Report
from ft_notebook.train.rank._groups import Interrupted, PeerFailed, Waker
from ft_notebook.train.rank._ordered_sum import Parts, in_process_sum
from ft_notebook.train.rank._trainer import Trainer
from ft_notebook.train.rank._verify import SLOTS, StateCheck, StateUnverified, fingerprint
from ft_notebook.train.report_kinds import EvalData, ReportData, StateRepairedData
from ft_notebook.train.spec import FitSpec, dumps_spec

pytestmark = pytest.mark.unit


def test_plans_and_reports_travel_as_plain_data() -> None:
    plan = Plan("r", 3, ("a", "b"), ("127.0.0.1", 5), how="survive", base=2, lost="c", committed=7)
    wire = plan.to_wire()
    assert all(isinstance(v, (str, int, bool, list, tuple, type(None))) for v in wire.values())
    assert Plan.from_wire(wire) == plan
    assert plan.rank_of("b") == 1
    assert plan.rank_of("c") is None
    report = Report.from_wire({**Report("r", "a", "ready", 1, 2, 3.0).to_wire(), "future": 1})
    assert report == Report("r", "a", "ready", 1, 2, 3.0)


def _spec(problem: dict[str, Any], **kw: Any) -> FitSpec:
    return FitSpec(epochs=1, **problem, **kw)


def _summed(trainers: list[Trainer], step: int, parts: int = 0) -> torch.Tensor:
    """The step's summed gradient, the ranks driven in this process: parts folded in
    part order as the owners of the buffer's slices fold them, or an all-reduce."""
    world = len(trainers)
    shares = [t.local_gradients(step, r, world, parts) for r, t in enumerate(trainers)]
    if isinstance(shares[0], Parts):
        return in_process_sum(shares)
    return trainers[0].reduce_rows(sum(s.clone() for s in shares))


def test_deterministic_gradients_do_not_depend_on_the_world_size() -> None:
    spec = _spec(regression_problem(size=64, batch=24), deterministic=True, chunk_size=4)
    cpu = torch.device("cpu")
    results = [_summed([Trainer(spec, cpu) for _ in range(world)], 1) for world in (1, 2, 3, 5)]
    for other in results[1:]:
        assert torch.equal(results[0], other)


def _relu_mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(16, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 4),
    )


def _relu_problem(samples: int, seed: int) -> dict[str, Any]:
    """A ReLU classifier on random data, one batch of ``samples``: rounding flips it."""
    g = torch.Generator().manual_seed(seed)
    problem = regression_problem(size=samples, batch=samples)
    problem["model"] = _relu_mlp
    problem["loss"] = torch.nn.functional.cross_entropy
    problem["data"].tensors = (
        torch.randn(samples, 16, generator=g),
        torch.randint(0, 4, (samples,), generator=g),
    )
    return problem


def test_ordered_sums_over_fixed_parts_do_not_depend_on_the_world_size() -> None:
    # the default arithmetic: a run that lost workers (world 2 or 1 of 3 parts) sums
    # to what the undisturbed run (world 3) sums, after the rounding to float32
    spec = _spec(_relu_problem(96, seed=3))
    assert spec.ordered_sums
    assert not spec.deterministic
    cpu = torch.device("cpu")

    def rounded(world: int) -> torch.Tensor:
        return _summed([Trainer(spec, cpu) for _ in range(world)], 0, parts=3).float()

    undisturbed = rounded(3)
    for world in (2, 1):
        assert torch.equal(rounded(world), undisturbed), world
    # the old arithmetic (one float32 slice per rank) does depend on it: this is what
    # made runs that lost workers end percents away from the undisturbed one
    spec.ordered_sums = False
    old = [_summed([Trainer(spec, cpu) for _ in range(w)], 0) for w in (3, 2, 1)]
    assert not (torch.equal(old[0], old[1]) and torch.equal(old[0], old[2]))


def test_two_parts_sum_in_float32_in_place_to_the_exact_sum_rounded_once() -> None:
    # a run that never had more than two workers sums in float32, in place: on two
    # workers (an all-reduce) and on one (a second backward pass into the same buffer)
    # it must give what the float64 path gives, p0 and p1 each from a pass of its own
    # into a zeroed buffer, summed in float64 and rounded once
    spec = _spec(_relu_problem(64, seed=5))
    cpu = torch.device("cpu")
    reference = Trainer(spec, cpu)
    indices = reference.step_indices(0)
    total = torch.zeros(reference.numel + 1, dtype=torch.float64)
    for part, lo, hi in reference.slices(len(indices), 0, 1, parts=2):
        flat = reference.flat_gradients()
        reference.backward(indices[lo:hi], (hi - lo) / len(indices), 0, part, flat)
        total += flat
    expected = total.float()[:-1]
    for world in (2, 1):
        trainers = [Trainer(spec, cpu) for _ in range(world)]
        buffers = [t.local_gradients(0, r, world, parts=2) for r, t in enumerate(trainers)]
        assert all(b.dtype == torch.float32 for b in buffers)  # half the bytes
        summed = buffers[0] if world == 1 else buffers[0] + buffers[1]
        assert torch.equal(summed[:-1], expected), world
        assert float(summed[-1]) == pytest.approx(float(total[-1]), rel=1e-6)
    # three parts are summed in part order: float32 rows, one per part of this rank
    three = Trainer(spec, cpu).local_gradients(0, 0, 2, parts=3)
    assert isinstance(three, Parts)
    assert sorted(three.rows) == [0, 1]  # rank 0 of 2 holds parts 0 and 1 of 3
    assert three.owners == [[0, 1], [2]]
    assert all(row.dtype == torch.float32 for row in three.rows.values())
    # a float64 model's rows are float64, the spare ones too (a float32 spare row once
    # rounded the counting model's gradients: samples counted 3.0000000000002274 times)
    wide = _spec(regression_problem(size=64, batch=24, dtype=torch.float64))
    held = Trainer(wide, cpu).local_gradients(0, 0, 2, parts=3)
    assert isinstance(held, Parts)
    assert [row.dtype for row in held.rows.values()] == [torch.float64, torch.float64]


def test_weighted_gradients_sum_to_the_single_process_gradient() -> None:
    spec = _spec(regression_problem(size=64, batch=24, dtype=torch.float64))
    cpu = torch.device("cpu")
    alone = _summed([Trainer(spec, cpu)], 0)
    three = _summed([Trainer(spec, cpu) for _ in range(3)], 0)
    torch.testing.assert_close(alone, three, rtol=1e-12, atol=1e-12)


def test_a_nonfinite_sum_is_not_applied() -> None:
    spec = _spec(counting_problem(size=64, batch=32, nonfinite=(0,)))
    trainer = Trainer(spec, torch.device("cpu"))
    step = next(s for s in range(2) if 0 in trainer.step_indices(s))
    before = trainer.model.counts.detach().clone()
    loss, ok = trainer.apply(trainer.reduce_rows(trainer.local_gradients(step, 0, 1)))
    assert not ok
    assert loss != loss
    assert torch.equal(trainer.model.counts.detach(), before)


def _pair(store: Any) -> list[Any]:
    groups: list[Any] = [None, None]

    def make(rank: int) -> None:
        groups[rank] = dist.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=10))

    threads = [threading.Thread(target=make, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return groups


def test_a_wait_is_interrupted_at_once_and_completes_normally_otherwise() -> None:
    store = dist.HashStore()
    a, b = _pair(store)
    waker = Waker()
    t = torch.ones(3)
    other = threading.Thread(target=lambda: b.allreduce([torch.ones(3)]).wait())
    other.start()
    waker.wait(a.allreduce([t]), "a sum")
    other.join()
    assert t.tolist() == [2.0, 2.0, 2.0]

    flag = threading.Event()
    waker.interrupted = flag.is_set
    threading.Timer(0.1, lambda: (flag.set(), waker.event.set())).start()
    started = time.monotonic()
    with pytest.raises(Interrupted):
        waker.wait(a.allreduce([torch.ones(3)]), "a sum its peer never joins")
    assert time.monotonic() - started < 1.0
    b.allreduce([torch.ones(3)]).wait()  # let the abandoned collective finish


def test_a_failed_collective_raises_peer_failed() -> None:
    class Failed:
        def get_future(self) -> Any:
            fut: Any = torch.futures.Future()
            fut.set_result(None)
            return fut

        def is_completed(self) -> bool:
            return True

        def wait(self) -> None:
            raise RuntimeError("Connection closed by peer [127.0.0.1]:1234\nmore")

    with pytest.raises(PeerFailed, match="a sum failed: Connection closed by peer"):
        Waker().wait(Failed(), "a sum")


def test_spec_checks_name_the_mistake() -> None:
    problem = counting_problem()
    with pytest.raises(TrainingError, match="batch_size must be a positive int"):
        _spec({**problem, "batch_size": 0}).validate()
    with pytest.raises(TrainingError, match="optimizer= must be a factory of the parameters"):
        _spec(
            {**problem, "optimizer": torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1)}
        ).validate()
    with pytest.raises(TrainingError, match="Give loss="):
        _spec({**problem, "loss": None}).validate()
    with pytest.raises(TrainingError, match="cannot be sent to the workers"):
        dumps_spec(_spec({**problem, "data": threading.Lock()}))


def test_a_durable_save_tells_how_long_it_held_up_training(tmp_path: Any) -> None:
    from ft_notebook.train.rank._durable import DurableCheckpoints

    durable = DurableCheckpoints(str(tmp_path), keep=2, run="r", every=10)
    state = {"w": torch.randn(1 << 20)}
    committed, error = durable.save(10, lambda: state, {})
    assert (committed, error) == (None, None)
    assert durable.last_stall_s > 0.0
    durable.retry_at = 100  # backing off after failures: no save, so no pause either
    durable.save(20, lambda: state, {})
    assert durable.last_stall_s == 0.0
    durable.close()


def test_a_commit_is_told_when_it_happens_not_at_the_next_save(tmp_path: Any) -> None:
    from ft_notebook.train.rank._durable import DurableCheckpoints

    told: list[int] = []
    durable = DurableCheckpoints(str(tmp_path), keep=2, run="r", every=10, on_commit=told.append)
    durable.save(10, lambda: {"w": torch.randn(1 << 16)}, {})
    poll_for(lambda: told == [10], timeout=30, what="the commit of step 10")
    assert durable.store().latest("r").step == 10  # told only once it is there
    durable.close()


def test_a_save_due_while_the_last_is_still_written_waits_for_the_next_turn(
    tmp_path: Any,
) -> None:
    from ft_notebook.train.rank._durable import DurableCheckpoints

    durable = DurableCheckpoints(str(tmp_path), keep=2, run="r", every=10)
    big = {"w": torch.randn(64 << 20)}  # 256 MB: still being written just after
    durable.save(10, lambda: big, {})
    copies: list[int] = []

    def state() -> dict[str, Any]:
        copies.append(1)
        return big

    assert durable.save(20, state, {}) == (None, None)
    assert (durable.deferred, copies) == (1, [])  # not even copied
    for step in (30, 40):
        durable.save(step, state, {})
    assert durable.lagging  # three due saves in a row behind the first
    durable.close()  # waits for the first to commit
    committed, error = durable.save(50, state, {})
    assert (committed, error, copies) == (10, None, [1])
    assert not durable.lagging
    durable.close()


def test_the_first_saves_memory_is_warmed_once_in_the_background(tmp_path: Any) -> None:
    from ft_notebook.train.rank._durable import DurableCheckpoints

    durable = DurableCheckpoints(str(tmp_path), keep=2, run="r", every=10)
    state = {"w": torch.randn(1 << 20), "b": torch.randn(3)}
    calls: list[int] = []

    def shaped() -> dict[str, Any]:
        calls.append(1)
        return state

    assert durable.warm(shaped)
    assert not durable.warm(shaped)  # once only
    assert calls == [1]
    pool = durable.store()._staging

    def kept() -> set[int]:
        return {b.data_ptr() for bufs in pool._free.values() for b in bufs}

    poll_for(lambda: len(kept()) == 2, timeout=30, what="the buffers to be warmed")
    warmed = kept()
    durable.save(10, lambda: state, {})
    durable.close()  # the save is written and its buffers are back
    assert kept() == warmed  # it copied into the warmed two, and made none
    assert DurableCheckpoints("", keep=2, run="r", every=10).warm(shaped) is False  # no store


class _Reports:
    def __init__(self) -> None:
        self.seen: list[EvalData] = []
        self.lines: list[str] = []
        self.done = threading.Event()

    def report(self, payload: EvalData) -> None:
        self.seen.append(payload)
        self.done.set()


def test_a_background_evaluation_sees_its_step_and_leaves_training_alone() -> None:
    from ft_notebook.train.rank._eval import BackgroundEval

    model = torch.nn.Linear(2, 1)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    release = threading.Event()
    grad_enabled: list[bool] = []

    def evaluate(m: torch.nn.Module) -> dict[str, float]:
        grad_enabled.append(torch.is_grad_enabled())
        release.wait(10)
        return {"w": float(m.weight.sum())}

    reports = _Reports()
    ev = BackgroundEval(evaluate, reports.lines.append, reports.report)
    before = float(model.weight.detach().sum())
    assert ev.start(4, model)
    with torch.no_grad():
        model.weight.add_(100.0)  # training goes on meanwhile
    assert not ev.start(8, model)  # the one of step 4 still runs: skipped, said so
    assert "step 8 skipped" in reports.lines[-1]
    release.set()
    ev.join()
    assert reports.seen == [EvalData(eval_step=4, eval={"w": before})]
    assert grad_enabled == [False]
    assert all(p.grad is not None for p in model.parameters())  # not taken by the copy


def test_an_evaluation_that_raises_or_cannot_be_copied_is_reported_not_fatal() -> None:
    from ft_notebook.train.rank._eval import BackgroundEval

    def broken(m: torch.nn.Module) -> dict[str, float]:
        raise ValueError("no validation data")

    reports = _Reports()
    ev = BackgroundEval(broken, reports.lines.append, reports.report)
    assert ev.start(3, torch.nn.Linear(2, 1))
    ev.join()
    assert reports.seen == [EvalData(eval_step=3, eval_error="ValueError: no validation data")]

    class Uncopyable(torch.nn.Linear):
        def __deepcopy__(self, memo: Any) -> Any:
            raise RuntimeError("Only Tensors created explicitly by the user support deepcopy")

    reports = _Reports()
    ev = BackgroundEval(lambda m: {"ok": 1.0}, reports.lines.append, reports.report)
    assert ev.start(5, Uncopyable(2, 1))  # evaluated on this thread instead
    assert reports.seen == [EvalData(eval_step=5, eval={"ok": 1.0})]
    assert "cannot be copied" in reports.lines[0]


def test_a_hung_final_evaluation_does_not_keep_the_run_open() -> None:
    from ft_notebook.train.rank._eval import BackgroundEval

    stuck = threading.Event()
    reports = _Reports()
    ev = BackgroundEval(
        lambda m: {"x": float(stuck.wait(30))}, reports.lines.append, reports.report
    )
    ev.start(9, torch.nn.Linear(2, 1))
    ev.join(timeout_s=0.2)
    assert reports.seen == [EvalData(eval_step=9, eval_error="not done after 0 s")]
    stuck.set()


def test_a_checkpoint_from_before_the_data_settings_were_saved_is_checked_by_its_cursor(
    tmp_path: Path,
) -> None:
    """Checkpoints of earlier versions hold the epoch and position but not the batch
    size: a resume with another batch size puts their step elsewhere, and is refused."""
    from ft_notebook.store import CheckpointStore
    from ft_notebook.train._earlier import refuse_another_order

    with CheckpointStore(tmp_path, keep=None, publish_events=False) as store:
        store.save("r", 4, {"w": torch.zeros(1)}, metadata={"epoch": 0, "position": 128, "seed": 0})
    refuse_another_order("r", str(tmp_path), 0, 32, 256)  # the same: 4 steps of 32
    with pytest.raises(TrainingError, match=r"its step 4 was epoch 0 at sample 128, and would"):
        refuse_another_order("r", str(tmp_path), 0, 64, 256)
    refuse_another_order("no-such-run", str(tmp_path), 1, 64, 256)  # nothing to resume


def test_a_rank_refuses_to_resume_from_a_checkpoint_of_other_data_settings(
    tmp_path: Path,
) -> None:
    """Where the kernel cannot reach the store, the ranks' own resume checks the
    checkpoint it reads: with another batch size it would skip and repeat samples."""
    from ft_notebook.train.rank._checkpoints import RankCheckpoints
    from ft_notebook.train.rank._held_state import HeldState

    def rank(batch: int) -> RankCheckpoints:
        spec = _spec(
            counting_problem(batch=batch), store_url=str(tmp_path), store_keep=3, checkpoint_every=2
        )
        held = HeldState(Trainer(spec, torch.device("cpu")))
        held.step = 0
        return RankCheckpoints(spec, "r", held, _RankReports())

    first = rank(32)
    first.held.step = 4
    first.durable.final(4, first.held.trainer.state, first.metadata())
    with pytest.raises(TrainingError, match=r"batch_size 32 then, 64 now"):
        rank(64).resume()
    same = rank(32)
    same.resume()
    assert same.held.step == 4
    assert same.held.check.vouches(
        4, same.held.trainer
    )  # read from a checkpoint the store verified


class _RankReports:
    """A rank's reporter that keeps what it is told."""

    def __init__(self) -> None:
        self.reports: list[ReportData] = []

    def log(self, message: str) -> None:
        pass

    def set_phase(self, phase: str) -> None:
        pass

    def report(self, payload: ReportData) -> None:
        self.reports.append(payload)


class _Rank:
    """One rank's state and its agreement with the others, as the rank actor wires them."""

    def __init__(self, held: Any, agreement: Any, reporter: _RankReports) -> None:
        self.held, self.agreement, self.reports = held, agreement, reporter.reports

    @property
    def trainer(self) -> Trainer:
        return self.held.trainer

    @property
    def check(self) -> StateCheck:
        return self.held.check


# ---- the self-check: members hold one state that one of them vouches for


def _trio_ranks() -> list[Any]:
    """Three rank states on real gloo groups (threads of this process), each having
    committed step 3 of the same training."""
    from ft_notebook.train.rank._agreement import StateAgreement
    from ft_notebook.train.rank._collectives import Collectives
    from ft_notebook.train.rank._groups import Generation
    from ft_notebook.train.rank._held_state import HeldState

    store = dist.HashStore()
    members = ("a", "b", "c")
    groups: list[Any] = [None] * 3

    def make(rank: int) -> None:
        groups[rank] = dist.ProcessGroupGloo(store, rank, 3, datetime.timedelta(seconds=20))

    _each(make, range(3))
    ranks = []
    for rank, name in enumerate(members):
        spec = _spec(regression_problem(size=64, batch=24))
        held = HeldState(Trainer(spec, torch.device("cpu")))
        collectives = Collectives(Waker())
        collectives.gen = Generation("p/", 1, members, name, groups[rank], "gloo")
        reporter = _RankReports()
        # no checkpoints: every member holds a state, none is read from the store
        agreement = StateAgreement(collectives, held, None, reporter)  # type: ignore[arg-type]
        for step in range(3):  # the same three steps on every rank, as a group trains
            held.trainer.apply(held.trainer.reduce_rows(held.trainer.local_gradients(step, 0, 1)))
        held.commit(3)
        ranks.append(_Rank(held, agreement, reporter))
    return ranks


def _each(fn: Any, items: Any) -> list[Any]:
    """``fn(item)`` for each item in a thread of its own (ranks meet in collectives);
    returns what each returned or raised."""
    items = list(items)
    out: list[Any] = [None] * len(items)

    def target(i: int) -> None:
        try:
            out[i] = fn(items[i])
        except BaseException as e:
            out[i] = e

    threads = [threading.Thread(target=target, args=(i,)) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def _params(r: Any) -> list[torch.Tensor]:
    return [p.detach().clone() for p in r.trainer.model.parameters()]


def test_members_that_hold_the_state_they_committed_pass_the_check() -> None:
    ranks = _trio_ranks()
    verdicts = _each(lambda r: r.agreement.verify("a test"), ranks)
    assert [(v.repaired, v.source) for v in verdicts] == [((), None)] * 3
    assert all(r.reports == [] for r in ranks)


def test_a_member_holding_another_state_takes_a_vouched_one_and_says_so() -> None:
    ranks = _trio_ranks()
    with torch.no_grad():  # rank 0's weights changed after it committed step 3
        next(ranks[0].trainer.model.parameters()).add_(1e-3)
    assert not ranks[0].check.vouches(3, ranks[0].trainer)
    verdicts = _each(lambda r: r.agreement.verify("a test"), ranks)
    assert {(v.repaired, v.source) for v in verdicts} == {((0,), 1)}
    for a, b in zip(_params(ranks[0]), _params(ranks[1]), strict=True):
        assert torch.equal(a, b)
    assert ranks[1].reports == [
        StateRepairedData(workers=("a",), source="b", at_step=3, when="a test")
    ]
    assert torch.equal(fingerprint(ranks[0].trainer), fingerprint(ranks[2].trainer))


def test_an_exact_copy_of_a_vouched_state_is_vouched_for_by_whoever_took_it() -> None:
    # ranks 1 and 2 take rank 0's state; if rank 0 is then lost before the group
    # checks, they must still vouch for it (a drill failed with "none of them holds a
    # state it committed itself" after exactly that)
    ranks = _trio_ranks()
    with torch.no_grad():
        for r in ranks[1:]:
            next(r.trainer.model.parameters()).add_(1e-3)
            r.check.forget()
    _each(lambda r: r.agreement.send_state(0), ranks)
    assert all(r.check.vouches(3, r.trainer) for r in ranks)
    # a copy of a state the sender does not vouch for is vouched for by nobody
    ranks = _trio_ranks()
    ranks[0].check.forget()
    _each(lambda r: r.agreement.send_state(0), ranks)
    assert not any(r.check.vouches(3, r.trainer) for r in ranks[1:])


def test_a_copy_that_differs_from_what_its_sender_vouched_for_is_not_vouched() -> None:
    spec = _spec(regression_problem(size=64, batch=24))
    sender, taker = Trainer(spec, torch.device("cpu")), Trainer(spec, torch.device("cpu"))
    sender.apply(sender.reduce_rows(sender.local_gradients(0, 0, 1)))
    check = StateCheck()
    check.committed(1, sender)
    claim = check.claim(1, sender, sending=True)
    mine = StateCheck()
    mine.received(taker, claim)  # the taker never loaded the sender's state
    assert not mine.vouches(1, taker)
    taker.model.load_state_dict(sender.model.state_dict())
    taker.optimizer.load_state_dict(sender.optimizer.state_dict())
    mine.received(taker, claim)
    assert mine.vouches(1, taker)


def test_states_nobody_can_vouch_for_fail_the_check_on_every_member() -> None:
    ranks = _trio_ranks()
    for r in ranks:
        r.check.forget()  # e.g. every member took its state from a peer that has gone
    with torch.no_grad():
        next(ranks[2].trainer.model.parameters()).mul_(1.5)
    errors = _each(lambda r: r.agreement.verify("a test"), ranks)
    assert all(isinstance(e, StateUnverified) for e in errors), errors
    assert "differ" in str(errors[0])
    assert "none of them holds a state it committed itself" in str(errors[0])
    assert "resume=True" in str(errors[0])


def test_the_per_step_fingerprint_sees_a_state_changed_after_its_commit() -> None:
    spec = _spec(regression_problem(size=64, batch=24))
    trainer = Trainer(spec, torch.device("cpu"))
    trainer.apply(trainer.reduce_rows(trainer.local_gradients(0, 0, 1)))
    check = StateCheck()
    check.committed(1, trainer)
    assert check.vouches(1, trainer)
    assert not check.vouches(2, trainer)  # another step than the one it committed
    state = trainer.optimizer.state[trainer.params[0]]
    state["exp_avg"].view(-1)[0] += 1.0  # the sampled elements include the first one
    assert not check.vouches(1, trainer)


def test_the_full_fingerprint_has_one_length_whatever_the_state_holds() -> None:
    # members whose optimizers hold different tensors still all-reduce vectors of one
    # length (a collective of mismatched sizes would fail or hang), and differ
    spec = _spec(regression_problem(size=64, batch=24))
    fresh, stepped = Trainer(spec, torch.device("cpu")), Trainer(spec, torch.device("cpu"))
    stepped.apply(stepped.reduce_rows(stepped.local_gradients(0, 0, 1)))  # Adam has state now
    a, b = fingerprint(fresh), fingerprint(stepped)
    assert a.shape == b.shape == (SLOTS + 1,)
    assert not torch.equal(a, b)


def test_a_plan_that_admits_joiners_waits_for_its_step_while_the_members_train() -> None:
    """A worker forked back within a second of a kill became ready while the survivors
    were in the first step they resumed with; its plan interrupted that step, and the
    survivors waited out its state transfer instead of committing (issue 35)."""
    from ft_notebook.train.rank._actor import RankActor

    actor = RankActor.__new__(RankActor)  # the plan bookkeeping alone, no worker
    actor._plan, actor.current, actor.training = None, None, False
    actor.held = types.SimpleNamespace(step=17)  # type: ignore[assignment]
    current = Plan("r", 3, ("a", "b"), ("h", 1))
    actor.current = current
    join = Plan("r", 4, ("a", "b", "c"), ("h", 1), switch_at=18)
    actor._plan = join
    actor.training = True
    assert actor.newer_plan()
    assert not actor.plan_due()  # step 17 goes on, its collectives not interrupted
    actor.held.step = 18
    assert actor.plan_due()  # committed: at the boundary, every member switches
    actor.held.step, actor.training = 18, False
    assert not actor.plan_due()  # forming or agreeing: the group gets to its steps first
    actor.training = True
    actor._plan = Plan("r", 5, ("a",), ("h", 1), lost="b")  # a loss: at once
    assert actor.plan_due()
