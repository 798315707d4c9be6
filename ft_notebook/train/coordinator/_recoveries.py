"""Recoveries as the coordinator records them, and collectives that fail with no loss.

The functions here are the one writer of ``RunBook.recovery`` but opening
``pending`` (a loss: :mod:`._generations`): closing ``pending`` into a completed
recovery (an event), ``joins`` (a joiner's first step trained), and ``regrouping``:
the count of re-forms of the same members after collectives failed at one step with
no worker lost. Past :data:`~._evictions.REFORMS_CAP` of them a member the evidence
names is evicted (:mod:`._evictions`); with none to evict, the run fails once its
step has stood still for the stall threshold.
"""

from __future__ import annotations

from dataclasses import replace

from ft_notebook.events import RunState
from ft_notebook.runfold import Recovery
from ft_notebook.train.coordinator import (
    _end,
    _evictions,
    _generations,
    _members,
    _pending,
    _stall,
    _status,
)
from ft_notebook.train.coordinator._actions import After, Decision, Log
from ft_notebook.train.coordinator._book import Regrouping, RunBook
from ft_notebook.train.coordinator._inputs import ReformDue
from ft_notebook.train.protocol import How, Report
from ft_notebook.train.report_kinds import PeerFailedData, ResumedData

#: Seconds a failed collective waits for the control plane's news of a loss.
LOSS_GRACE_S = 0.5


def on_resumed(book: RunBook, r: Report, d: Decision) -> RunBook:
    """Rank 0 committed the first step of generation ``r.gen``: joiners trained,
    and the recovery that generation was made for, if any, is complete."""
    members, trained = _members.trained(book.members, r.gen)
    joins = [
        {
            **join,
            "trained_at": r.time,
            # from its worker registering; and from its rank built and ready to train
            # (what another tool calls a replica's arrival)
            "rejoin_s": round(r.time - join["arrived_at"], 3),
            "from_ready_s": round(r.time - join["ready_at"], 3),
        }
        for join in trained
    ]
    book = replace(
        book,
        members=members,
        recovery=replace(book.recovery, joins=(*book.recovery.joins, *joins)),
    )
    pending = book.recovery.pending
    # the generation made for the recovery: when joiners were admitted before it
    # committed, the recovery is still its (the survivors went on, with fewer); when it
    # never trained (a later loss, no members), the one that resumed
    plan = pending.made if pending is not None else None
    if plan is None or r.gen != plan.gen:
        plan = book.plan
    if pending is None or plan is None or r.gen != plan.gen:
        return book
    recovery = Recovery(
        cause=pending.cause,
        detected_at=pending.detected_at,
        resumed_at=r.time,
        rto_s=round(r.time - pending.detected_at, 4),
        steps_lost=max(0, pending.highest_step - ResumedData.of(r).synced_step),
        workers_before=pending.workers_before,
        workers_after=len(plan.members),
        how=plan.how,
        generation=plan.gen,
        step=r.step,
        # the members checked that they went on from one state a member vouched for
        verified=plan.gen in book.gens.verified,
    )
    book = _pending.closed(book)
    book = _status.alive(_status.stepped(book, r.step, d, at_least=True), d)
    # the whole recovery, which the book's view (run.info()) folds as every view does
    book = _status.publish(book, recovery.as_payload(), d)
    book = _status.set_state(
        book, RunState.RUNNING, f"recovered with {len(plan.members)} workers", d
    )
    return _status.update_health(book, d)


def on_peer_failed(book: RunBook, r: Report, d: Decision) -> RunBook:
    """A collective failed before the control plane heard of a loss: give the loss
    a moment to arrive, else form the same members again (:func:`on_reform_due`)."""
    book = _evictions.on_not_met(book, r)
    failed = PeerFailedData.of(r)
    if book.plan is not None and failed.plan == book.plan.gen:
        d.do(After(LOSS_GRACE_S, ReformDue(0.0, book.plan.gen, r.step, failed.error)))
    return book


def on_reform_due(book: RunBook, due: ReformDue, d: Decision) -> RunBook:
    """A collective failed at ``due.step`` and no loss followed: form the same members
    again. After :data:`~._evictions.REFORMS_CAP` failures in a row at the step, a
    member shown not to meet its peers is evicted and the others go on. With none to
    evict (no evidence, or ``min_workers``), when they keep failing for the run's stall
    threshold (a broken interconnect, a GPU in a bad state), the run fails and says so,
    rather than re-forming for ever while it looks as if it were running."""
    plan = book.plan
    if book.finished or plan is None or plan.gen != due.gen:
        return book
    stuck, step = book.recovery.regrouping, due.step
    if step < 0 and stuck is not None:
        step = stuck.step  # a rank that joined with no state yet: no news of progress
    if stuck is None or stuck.step != step:  # it got further (or rolled back)
        stuck = Regrouping(step=step, since=d.now)
    stuck = replace(stuck, count=stuck.count + 1, failures=stuck.failures + 1)
    book = replace(book, recovery=replace(book.recovery, regrouping=stuck))
    if stuck.count >= _evictions.REFORMS_CAP:
        evicted = _evictions.evict_one(book, plan, stuck.count, due.error, d)
        if evicted is not None:
            regrouping = replace(stuck, count=0)
            return replace(evicted, recovery=replace(evicted.recovery, regrouping=regrouping))
        waited = d.now - stuck.since
        if waited >= _stall.stall_threshold(book):
            return _end.finish(book, RunState.FAILED, _never_met(book, stuck, waited, due.error), d)
    d.do(
        Log(
            "warning",
            f"run {book.name}: a collective failed at step {step} ({due.error}); forming the "
            f"same {len(plan.members)} workers again ({stuck.failures} in a row)",
        )
    )
    members = [m for m in plan.members if m in book.members.actors]
    if members and len(members) >= book.options.min_workers:
        return _generations.new_plan(book, members, How.FORM, d)
    return book


def _never_met(book: RunBook, stuck: Regrouping, waited: float, error: str) -> str:
    return (
        f"the workers' collectives failed {stuck.failures} times in a row at step "
        f"{stuck.step} over {waited:.0f} s, with no worker lost (last error: "
        f"{error or 'none given'}), and no member could be evicted: none was seen absent "
        f"from the rendezvous or is new, or evicting one would leave fewer than "
        f"min_workers={book.options.min_workers}. Check that the workers can reach each "
        f"other (ft-notebook.cluster.interface, NCCL_DEBUG=INFO on GPUs), then go on from "
        f"the newest checkpoint with ft.fit(..., resume=True)."
    )
