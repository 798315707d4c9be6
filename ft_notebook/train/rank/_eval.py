"""Evaluation off the training thread: ``eval_fn`` runs on a copy of the model.

Rank 0 evaluates every ``eval_every`` steps. Run in the training thread, an
evaluation holds every other rank inside the next collective until it ends; that
costs the run time, not a regroup, as long as it ends within ``collective-timeout``
(10 minutes; the rendezvous has its own, shorter, timeout). So the model is copied
(its weights at that step, without gradients) and evaluated in a thread while
training goes on; the result is reported with the step it belongs to. An evaluation
still running when the next falls due is waited for briefly, then that one is
skipped. The copy costs a second copy of the weights on the device; a model that
cannot be deep-copied is evaluated on the training thread.
"""

from __future__ import annotations

import copy
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ft_notebook.train.protocol import plain
from ft_notebook.train.report_kinds import EvalData

#: How long a due evaluation waits for the one before (it holds up training meanwhile).
_GRACE_S = 1.0
#: How long the end of a run waits for its last evaluation before it finishes anyway.
FINAL_WAIT_S = 300.0


class BackgroundEval:
    """Rank 0's evaluations: one at a time, each on a copy of the model in a thread;
    results (or the error) are reported as ``eval`` with the step they belong to."""

    def __init__(
        self,
        eval_fn: Callable[[Any], dict[str, Any]],
        log: Callable[[str], None],
        report: Callable[[EvalData], None],
    ) -> None:
        self.eval_fn, self.log, self.report = eval_fn, log, report
        self._thread: threading.Thread | None = None
        self._running_step = 0

    def start(self, step: int, model: Any) -> bool:
        """Evaluate ``model`` as it is at ``step``; False if skipped (one still runs)."""
        if self._thread is not None:
            self._thread.join(_GRACE_S)
            if self._thread.is_alive():
                self.log(
                    f"evaluation at step {step} skipped: the one of step "
                    f"{self._running_step} is still running"
                )
                return False
        try:
            snapshot = _copy_without_grads(model)
        except Exception as e:  # e.g. a non-leaf tensor attribute (weight_norm)
            self.log(
                f"evaluation at step {step} on the training thread: the model cannot be "
                f"copied for a background evaluation ({type(e).__name__}: {e})"
            )
            self._evaluate(step, model)
            return True
        self._running_step = step
        self._thread = threading.Thread(
            target=self._evaluate, args=(step, snapshot), name="ft-notebook-eval", daemon=True
        )
        self._thread.start()
        return True

    def join(self, timeout_s: float = FINAL_WAIT_S) -> None:
        """Wait for the running evaluation (the run's last one is part of its result),
        at most ``timeout_s``: a hung ``eval_fn`` must not keep the run from ending."""
        if self._thread is None:
            return
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            step = self._running_step
            self.log(f"evaluation at step {step} still running after {timeout_s:.0f} s")
            self.report(EvalData(eval_step=step, eval_error=f"not done after {timeout_s:.0f} s"))

    def _evaluate(self, step: int, model: Any) -> None:
        import torch

        device = next((p.device for p in model.parameters()), None)
        if device is not None and device.type == "cuda":
            torch.cuda.set_device(device)  # per thread: "cuda" means this worker's GPU
        try:
            with torch.no_grad():  # per thread: the training thread keeps its gradients
                values = {str(k): plain(v) for k, v in self.eval_fn(model).items()}
        except Exception as e:  # the user's function: say so, keep training
            self.log(f"evaluation at step {step} failed:\n{traceback.format_exc()}")
            self.report(EvalData(eval_step=step, eval_error=f"{type(e).__name__}: {e}"[:500]))
            return
        self.report(EvalData(eval_step=step, eval=values))


def _copy_without_grads(model: Any) -> Any:
    """A deep copy of ``model`` sharing nothing with it; its gradients (views into the
    trainer's flat buffer) are not copied."""
    params = list(model.parameters())
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    try:
        return copy.deepcopy(model)
    finally:
        for p, g in zip(params, grads, strict=True):
            p.grad = g
