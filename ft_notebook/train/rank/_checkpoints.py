"""One rank's durable checkpoints: saving its state, resuming from one, rolling back.

:class:`RankCheckpoints` owns the rank's :class:`~._durable.DurableCheckpoints` and
what goes with a saved state (its metadata: where the data order stands, and what
that order depends on). Checkpoints go out asynchronously, from rank 0 only; a
failing store only delays the next. A start with ``resume=True`` and a generation
whose members hold no state read the newest one back; too many non-finite steps in a
row roll the state back to it (the rank actor then has the members agree again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ft_notebook.train._earlier import check_order
from ft_notebook.train._schedule import CheckpointSchedule
from ft_notebook.train.rank._durable import DurableCheckpoints
from ft_notebook.train.report_kinds import CheckpointData, CheckpointFailedData

if TYPE_CHECKING:
    from ft_notebook.train.rank._held_state import HeldState
    from ft_notebook.train.rank._report import RankReporter
    from ft_notebook.train.spec import FitSpec

#: A checkpoint that holds up training longer than this says so in the rank's log.
_STALL_WORTH_LOGGING_S = 0.05


class RankCheckpoints:
    def __init__(self, spec: FitSpec, run: str, held: HeldState, reporter: RankReporter) -> None:
        self.spec, self.run, self.held, self.reporter = spec, run, held, reporter
        #: When saves are due: every N steps, or the auto plan (see ._schedule)
        self.schedule = CheckpointSchedule(
            None if spec.checkpoint_auto else spec.checkpoint_every, spec.mtbf_s
        )
        #: step -> what its save cost training, and the plan made after it, until it commits
        self._saved: dict[int, CheckpointData] = {}
        self.durable = DurableCheckpoints(
            spec.store_url, spec.store_keep, run, spec.checkpoint_every, on_commit=self._committed
        )

    def _committed(self, step: int) -> None:
        """A save committed (on the writer's thread): told with what it cost."""
        self.reporter.report(self._saved.pop(step, CheckpointData(checkpoint_step=step)))

    def metadata(self) -> dict[str, Any]:
        held, spec = self.held, self.spec
        cursor = held.trainer.cursor(held.step)
        return {
            "epoch": cursor.epoch,
            "position": cursor.position,
            "seed": spec.seed,
            # what the cursor depends on: a resume with others would skip or repeat samples
            "batch_size": spec.batch_size,
            "samples": held.trainer.size,
            "skip": sorted(held.skip),
            "nonfinite_total": held.nonfinite_total,
            "loss": held.loss,  # what a run resumed from this state reports before its first step
        }

    def after_step(self, checkpoint: bool) -> None:
        """Rank 0, after each committed step: a checkpoint if one is due (and
        ``checkpoint``), and, once, the first save's host memory made meanwhile."""
        held, every = self.held, self.schedule.every
        next_due = (held.step // every + 1) * every
        # once: the optimizer has its state now
        if next_due <= held.trainer.total_steps and self.durable.warm(held.trainer.state):
            self.reporter.log("preparing the first checkpoint's host memory in the background")
        if checkpoint and self.schedule.due(held.step):
            self.save()

    #: The newest measured seconds per step (rank 0's progress window sets it).
    step_time_s: float | None = None

    def save(self) -> None:
        """An asynchronous durable checkpoint; a failing store only delays the next."""
        # a commit is reported as it happens (DurableCheckpoints.on_commit), not here
        held, durable, log = self.held, self.durable, self.reporter.log
        _, error = durable.save(held.step, held.trainer.state, self.metadata())
        if error is None:
            planned = self.schedule.saved(held.step, durable.last_stall_s, self.step_time_s)
            plan = None
            if planned is not None:
                made = planned.plan
                plan = {
                    "every_steps": planned.every,
                    "step_time_s": round(planned.step_time_s, 6),
                    "cost_s": round(made.cost, 6),
                    "mtbf_s": made.mtbf,
                    "mtbf_source": self.spec.mtbf_source,
                    "interval_s": round(made.interval, 3),
                    "waste": round(made.waste, 6),
                }
            stall_s = round(durable.last_stall_s, 6)
            told = CheckpointData(checkpoint_step=held.step, stall_s=stall_s, plan=plan)
            self._saved[held.step] = told
        if durable.last_stall_s > _STALL_WORTH_LOGGING_S:  # e.g. pinned buffers allocated
            log(
                f"checkpoint at step {held.step}: training paused "
                f"{durable.last_stall_s:.3f} s to copy the state"
            )
        if error is not None:
            retry = durable.retry_at
            log(f"checkpoint at step {held.step} failed ({error}); next try at step {retry}")
            self.reporter.report(CheckpointFailedData(error=str(error)[:500], retry_at=retry))

    def final(self) -> int | None:
        """Commit the last step (unless it already is); None if that failed, which is
        logged: the state stays on this worker (``final_state``)."""
        held = self.held
        try:
            return self.durable.final(held.step, held.trainer.state, self.metadata())
        except Exception as e:
            self.reporter.log(f"the final checkpoint failed: {e}")
            return None

    def resume(self) -> None:
        """The newest checkpoint's state, if there is one."""
        held = self.held
        ckpt = self.durable.newest()
        if ckpt is None:
            self.reporter.log("resume: no checkpoint yet; starting from scratch")
            return
        # a resume=True start may meet a checkpoint of other data settings (the kernel
        # checks too, where it can reach the store)
        spec = self.spec
        check_order(
            self.run, ckpt.step, ckpt.metadata, spec.seed, spec.batch_size, held.trainer.size
        )
        held.trainer.load_state(ckpt.state)
        held.commit(ckpt.step)  # the store verified its hashes
        held.restore_counts(ckpt.metadata)
        self.reporter.log(f"resumed from the checkpoint of step {ckpt.step}")

    def roll_back(self) -> int:
        """Back to the newest durable checkpoint (or the initial state), keeping the
        steps marked to be skipped; returns the step rolled back from."""
        from ft_notebook.train.rank._trainer import Trainer

        held = self.held
        ckpt = self.durable.newest()
        if ckpt is not None:
            held.trainer.load_state(ckpt.state)
        else:
            held.trainer = Trainer(self.spec, held.trainer.device)
        came_from = held.step
        held.commit(ckpt.step if ckpt is not None else 0)  # verified by the store's hashes
        return came_from

    def close(self) -> None:
        self.durable.close()
