"""What ``ft.fit(..., wait=True)`` shows while it waits: step, epoch, loss, samples/s,
ETA, world size and recoveries.

In a notebook kernel it is an ipywidgets progress bar updated in place; on a terminal
one line redrawn with a carriage return; anywhere else (a log file, a pipe) nothing.
The rate is measured here, from the steps the run's record reports between polls, so
it is the run's, whichever kernel watches it.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

#: At most this many redraws a second: a fast run must not flood the front end.
_REDRAWS_PER_S = 4.0


def progress_line(info: dict[str, Any], steps_per_s: float | None, batch_size: int | None) -> str:
    """``step 120/256 · epoch 1 · loss 0.4231 · 3,072 samples/s · ETA 4 s · 3 workers``."""
    total = info.get("total_steps") or 0
    parts = [f"step {info['step']}/{total or '?'}", f"epoch {info.get('epoch', 0)}"]
    loss = info.get("loss")
    if isinstance(loss, (int, float)):
        parts.append(f"loss {loss:.4g}")
    if steps_per_s:
        rate = (
            f"{steps_per_s * batch_size:,.0f} samples/s"
            if batch_size
            else f"{steps_per_s:.1f} steps/s"
        )
        parts.append(rate)
        if total and total > info["step"]:
            parts.append(f"ETA {_duration((total - info['step']) / steps_per_s)}")
    parts.append(f"{info.get('world_size', 0)} workers")
    recoveries = len(info.get("recoveries") or ())
    if recoveries:
        parts.append(f"{recoveries} recover{'y' if recoveries == 1 else 'ies'}")
    state = info.get("state", "")
    if state not in ("RUNNING", "", None):
        parts.append(str(state))
    return " · ".join(parts)


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """A progress display for one wait; ``update`` it with ``run.info()`` each poll."""

    def __init__(self, name: str, batch_size: int | None = None, out: TextIO | None = None) -> None:
        self.name, self.batch_size = name, batch_size
        self.out = out or sys.stderr
        self.kind = "widget" if _in_kernel() else ("text" if _is_terminal(self.out) else "none")
        self._widget: Any = None
        self._last_draw = 0.0
        self._rate: tuple[float, int] | None = None  # (time, step) of the first poll
        self.steps_per_s: float | None = None
        self.lines = 0  # redraws so far

    def update(self, info: dict[str, Any], *, final: bool = False) -> None:
        now = time.monotonic()
        if self._rate is None:
            self._rate = (now, int(info["step"]))
        elif now > self._rate[0] and info["step"] > self._rate[1]:
            self.steps_per_s = (info["step"] - self._rate[1]) / (now - self._rate[0])
        if not final and now - self._last_draw < 1 / _REDRAWS_PER_S:
            return
        self._last_draw = now
        line = f"{self.name}: {progress_line(info, self.steps_per_s, self.batch_size)}"
        self.lines += 1
        if self.kind == "widget":
            self._draw_widget(info, line)
        elif self.kind == "text":
            end = "\n" if final else ""
            self.out.write(f"\r{line}\x1b[K{end}")
            self.out.flush()

    def _draw_widget(self, info: dict[str, Any], line: str) -> None:
        import ipywidgets  # type: ignore[import-untyped]
        from IPython.display import display

        total = int(info.get("total_steps") or 0)
        if self._widget is None:
            bar = ipywidgets.IntProgress(min=0, max=max(total, 1), value=0)
            label = ipywidgets.Label(value="")
            self._widget = (bar, label)
            display(ipywidgets.HBox([bar, label]))
        bar, label = self._widget
        bar.max = max(total, 1)
        bar.value = min(int(info["step"]), bar.max)
        bar.bar_style = {"COMPLETED": "success", "FAILED": "danger"}.get(str(info.get("state")), "")
        label.value = line


def _in_kernel() -> bool:
    """In a Jupyter kernel with ipywidgets importable (a terminal IPython is not)."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        from IPython import get_ipython

        ip = get_ipython()
        if ip is None or type(ip).__name__ != "ZMQInteractiveShell":
            return False
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def _is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
