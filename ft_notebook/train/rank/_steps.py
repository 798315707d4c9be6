"""The training steps of one rank, generation after generation.

:class:`StepLoop` owns what happens from a generation's verified state to its last
step: each step's gradients, their all-reduce and the commit, the streak of
non-finite steps and the rollback it ends in, and rank 0's duties after a step (a due
checkpoint, a background evaluation, throttled progress reports), then the end of
the run (the last check, the final state and checkpoint). It lives as long as the
rank's model does; the rank actor hands it each generation to train.

A step is committed once its gradient reduction completed on this rank.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ft_notebook.train.protocol import Phase, plain
from ft_notebook.train.rank._eval import BackgroundEval
from ft_notebook.train.rank._groups import Interrupted
from ft_notebook.train.rank._ordered_sum import Parts
from ft_notebook.train.report_kinds import (
    DoneData,
    NonfiniteData,
    ProgressData,
    ResumedData,
    RollbackData,
)

if TYPE_CHECKING:
    from ft_notebook.train.protocol import Plan
    from ft_notebook.train.rank._agreement import StateAgreement
    from ft_notebook.train.rank._checkpoints import RankCheckpoints
    from ft_notebook.train.rank._collectives import Collectives
    from ft_notebook.train.rank._held_state import HeldState
    from ft_notebook.train.rank._report import RankReporter
    from ft_notebook.train.spec import FitSpec

#: Rank 0 reports progress at most this often.
_PROGRESS_EVERY_S = 0.25


class StepLoop:
    def __init__(
        self,
        spec: FitSpec,
        held: HeldState,
        collectives: Collectives,
        agreement: StateAgreement,
        checkpoints: RankCheckpoints,
        reporter: RankReporter,
        plan_due: Callable[[], bool],
    ) -> None:
        self.spec, self.held, self.collectives = spec, held, collectives
        self.agreement, self.checkpoints, self.reporter = agreement, checkpoints, reporter
        self.plan_due = plan_due  # a newer plan that stops the steps now
        self.evaluator: BackgroundEval | None = None  # rank 0's, once it evaluates
        self._last_progress = 0.0
        self._window: tuple[float, int] | None = None
        #: a robust aggregator, since the last progress report: worker -> suspect steps
        self._suspects: collections.Counter[str] = collections.Counter()
        self._mean_steps = 0

    def train(self, plan: Plan) -> None:
        """Train ``plan``'s generation to the end, or raise Interrupted / PeerFailed."""
        gen, held, report = self.collectives.current(), self.held, self.reporter.report
        streak = 0
        synced_step, first = held.step, True
        self._window = (time.perf_counter(), held.step)
        # held.trainer, not a copy: a rollback to the initial state builds a new one
        while held.step < held.trainer.total_steps:
            if self.plan_due():
                raise Interrupted("a newer plan")
            step, trainer = held.step, held.trainer
            if step in held.skip:
                held.commit(step + 1)
                continue
            self.reporter.set_phase(Phase.COMPUTE)
            share = trainer.local_gradients(step, gen.rank, gen.world, plan.parts)
            self.reporter.set_phase(Phase.REDUCE)
            what = f"the gradient reduction of step {step}"
            if isinstance(share, Parts):
                total = share.sum(self.collectives, what)
            else:
                self.collectives.allreduce(share, "SUM", what)
                total = trainer.reduce_rows(share)
            stats = trainer.stats_table  # BatchNorm statistics per part: zeros but ours
            if stats is not None:
                self.collectives.allreduce(stats, "SUM", f"the BatchNorm statistics of step {step}")
            loss, ok = trainer.apply(total, stats)
            held.commit(step + 1)
            if first and gen.rank == 0:  # the coordinator times recoveries by this
                report(ResumedData(synced_step=synced_step))
            first = False
            if ok:
                streak = 0
            else:
                streak += 1
                held.nonfinite_total += 1
                held.skip.add(step)
                if gen.rank == 0:
                    report(NonfiniteData(at_step=step, streak=streak, loss=plain(loss)))
                if streak >= self.spec.nonfinite_limit:
                    self._rollback(streak, plan)
                    streak = 0
                    continue
            held.loss = plain(loss)
            if gen.rank == 0 and trainer.aggregated is not None:
                self._note_aggregate(trainer.aggregated, gen.members)
            if gen.rank == 0:
                # no checkpoint while a streak of non-finite steps goes on: a rollback
                # must not land on the state it rolls back from
                self._after_step(loss, checkpoint=streak == 0)

    def _note_aggregate(self, aggregated: Any, members: tuple[str, ...]) -> None:
        """A robust aggregator's step: who was suspect, and whether the rule held."""
        for r in aggregated.suspects:
            self._suspects[members[r]] += 1
        if not aggregated.held:
            self._mean_steps += 1

    def _robust_window(self) -> tuple[dict[str, int], int]:
        """What the progress report says of the aggregator since the last one: the
        suspects and the steps the rule did not hold for."""
        told = dict(self._suspects), self._mean_steps
        self._suspects, self._mean_steps = collections.Counter(), 0
        return told

    def _rollback(self, streak: int, plan: Plan) -> None:
        """Too many non-finite steps in a row: back to the newest durable checkpoint
        (or the initial state), keeping the offending steps marked to be skipped."""
        held = self.held
        skipped = sorted(held.skip)[-streak:]  # before a peer's state may replace them
        came_from = self.checkpoints.roll_back()
        # ranks may have read different checkpoints: agree on the newest
        self.agreement.sync(plan.committed)
        self.agreement.verify("a rollback")
        self.reporter.log(f"{streak} non-finite steps in a row: rolled back to step {held.step}")
        if self.collectives.current().rank == 0:
            self.reporter.report(
                RollbackData(to_step=held.step, from_step=came_from, skipped=tuple(skipped))
            )

    def _after_step(self, loss: float, *, checkpoint: bool) -> None:
        """Rank 0's duties after a committed step."""
        held, spec, step = self.held, self.spec, self.held.step
        self.checkpoints.after_step(checkpoint)
        if spec.eval_fn is not None and spec.eval_every and step % spec.eval_every == 0:
            if self.evaluator is None:
                self.evaluator = BackgroundEval(
                    spec.eval_fn, self.reporter.log, self.reporter.report
                )
            self.evaluator.start(step, held.trainer.model)
        now = time.perf_counter()
        if now - self._last_progress >= _PROGRESS_EVERY_S:
            start, first = self._window or (now, step)
            rate = (step - first) / (now - start) if now > start else 0.0
            self._window = (now, step)
            self._last_progress = now
            if rate > 0:
                self.checkpoints.step_time_s = 1.0 / rate
            suspects, mean_steps = self._robust_window()
            self.reporter.report(
                ProgressData(
                    loss=plain(loss),
                    steps_per_s=round(rate, 3),
                    samples_per_s=round(rate * spec.batch_size, 1),
                    world=self.collectives.current().world,
                    epoch=step // held.trainer.steps_per_epoch,
                    lagging=self.checkpoints.durable.lagging,
                    suspects=suspects,
                    mean_steps=mean_steps,
                )
            )

    def finish(self) -> bytes | None:
        """The run's last step is committed: check the state, wait for the last
        evaluation; rank 0 commits the final checkpoint, reports ``done`` and returns
        the final state's bytes (kept on the worker whether the checkpoint commits or
        not); the others return None."""
        gen, held = self.collectives.current(), self.held
        self.agreement.verify("the last step")  # never COMPLETED from a state nobody vouches for
        self.reporter.set_phase(Phase.DONE)
        if self.evaluator is not None:
            self.evaluator.join()  # bounded: a hung eval_fn does not keep the run open
        final = None
        if gen.rank == 0:
            final = held.to_bytes()
            saved = self.checkpoints.final()
            suspects, mean_steps = self._robust_window()  # since the last progress report
            self.reporter.report(
                DoneData(
                    checkpoint=saved,
                    nonfinite_total=held.nonfinite_total,
                    epoch=held.step // held.trainer.steps_per_epoch,
                    loss=held.loss,  # read from the checkpoint when resumed at the end
                    suspects=suspects,
                    mean_steps=mean_steps,
                )
            )
        self.reporter.log(f"finished at step {held.step}")
        return final
