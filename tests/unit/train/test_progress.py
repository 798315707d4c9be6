"""The progress line of ft.fit(wait=True), and its terminal form."""

from __future__ import annotations

import io
from typing import Any

from ft_notebook.train._progress import Progress, progress_line


def info(step: int, **more: Any) -> dict[str, Any]:
    base = {
        "step": step,
        "total_steps": 256,
        "epoch": 1,
        "loss": 0.42312,
        "world_size": 3,
        "recoveries": [],
        "state": "RUNNING",
    }
    return {**base, **more}


def test_the_line_has_step_epoch_loss_rate_eta_world_and_recoveries() -> None:
    line = progress_line(info(128, recoveries=[{}]), steps_per_s=16.0, batch_size=96)
    assert line == (
        "step 128/256 · epoch 1 · loss 0.4231 · 1,536 samples/s · ETA 8 s · 3 workers · 1 recovery"
    )
    attached = progress_line(info(10, total_steps=0, loss=None), steps_per_s=2.0, batch_size=None)
    assert attached == "step 10/? · epoch 1 · 2.0 steps/s · 3 workers"
    done = progress_line(info(256, state="COMPLETED"), steps_per_s=16.0, batch_size=96)
    assert done.endswith("3 workers · COMPLETED")
    assert "ETA" not in done


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_line_is_redrawn_in_place_and_ends_with_a_newline() -> None:
    out = Tty()
    bar = Progress("r", batch_size=32, out=out)
    assert bar.kind == "text"
    bar.update(info(0))
    bar.update(info(5))  # within a quarter second: not redrawn
    bar.update(info(256, state="COMPLETED"), final=True)
    text = out.getvalue()
    assert text.count("\r") == 2
    assert text.startswith("\rr: step 0/256")
    assert "\rr: step 256/256" in text
    assert text.endswith("COMPLETED\x1b[K\n")
    assert bar.steps_per_s is not None
    assert bar.steps_per_s > 0


def test_off_a_terminal_and_outside_a_kernel_nothing_is_written() -> None:
    out = io.StringIO()
    bar = Progress("r", out=out)
    bar.update(info(3), final=True)
    assert bar.kind == "none"
    assert out.getvalue() == ""
