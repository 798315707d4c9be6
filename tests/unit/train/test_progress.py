"""The progress line of ft.fit(wait=True), and its terminal form: the run's view (the
fold of its events that the dashboards and the panel show too), drawn."""

from __future__ import annotations

import io
from typing import Any

from ft_notebook.events import RunState
from ft_notebook.runfold import Recovery, RunView
from ft_notebook.train.kernel._progress import Progress, progress_line


def view(step: int, **more: Any) -> RunView:
    base: dict[str, Any] = {
        "state": RunState.RUNNING,
        "step": step,
        "total_steps": 256,
        "epoch": 1,
        "loss": 0.42312,
        "world_size": 3,
        "samples_per_s": 1536.0,
        "eta_s": 8.0,
    }
    return RunView(**{**base, **more})


def test_the_line_has_step_epoch_loss_rate_eta_world_and_recoveries() -> None:
    recovery = Recovery("cpu2: worker lost", 0.0, 0.06, 0.06, 0, 3, 2, "survive", 2, 100, True)
    line = progress_line(view(128, recoveries=(recovery,)))
    assert line == (
        "step 128/256 · epoch 1 · loss 0.4231 · 1,536 samples/s · ETA 8 s · 3 workers · 1 recovery"
    )
    attached = progress_line(view(10, total_steps=0, loss=None, eta_s=None, samples_per_s=64.0))
    assert attached == "step 10/? · epoch 1 · 64 samples/s · 3 workers"
    done = progress_line(view(256, state=RunState.COMPLETED, eta_s=0.0))
    assert done.endswith("3 workers · COMPLETED")
    assert "ETA" not in done
    assert progress_line(RunView()) == "step 0/? · epoch 0 · 0 workers"  # nothing told yet


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_line_is_redrawn_in_place_and_ends_with_a_newline() -> None:
    out = Tty()
    bar = Progress("r", out=out)
    assert bar.kind == "text"
    bar.update(view(0))
    bar.update(view(5))  # within a quarter second: not redrawn
    bar.update(view(256, state=RunState.COMPLETED), final=True)
    text = out.getvalue()
    assert text.count("\r") == 2
    assert text.startswith("\rr: step 0/256")
    assert "\rr: step 256/256" in text
    assert text.endswith("COMPLETED\x1b[K\n")


def test_off_a_terminal_and_outside_a_kernel_nothing_is_written() -> None:
    out = io.StringIO()
    bar = Progress("r", out=out)
    bar.update(view(3), final=True)
    assert bar.kind == "none"
    assert out.getvalue() == ""
