"""What ``ft.fit(..., wait=True)`` shows while it waits: step, epoch, loss, samples/s,
ETA, world size and recoveries.

In a notebook kernel it is an ipywidgets progress bar updated in place; on a terminal
one line redrawn with a carriage return; anywhere else (a log file, a pipe) nothing.
It shows the run's :class:`~ft_notebook.runfold.RunView`, the fold of its events that
the dashboards and the JupyterLab panel show too; the rate and the ETA are the ones
the run published (measured once, by the run), whichever kernel watches it.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from ft_notebook.runfold import RunView

#: At most this many redraws a second: a fast run must not flood the front end.
_REDRAWS_PER_S = 4.0


def progress_line(view: RunView) -> str:
    """``step 120/256 · epoch 1 · loss 0.4231 · 3,072 samples/s · ETA 4 s · 3 workers``."""
    step, total = view.step or 0, view.total_steps or 0
    parts = [f"step {step}/{total or '?'}", f"epoch {view.epoch or 0}"]
    if view.loss is not None:
        parts.append(f"loss {view.loss:.4g}")
    if view.samples_per_s:
        parts.append(f"{view.samples_per_s:,.0f} samples/s")
    finished = view.state is not None and view.state.finished
    if view.eta_s is not None and not finished and total > step:
        parts.append(f"ETA {_duration(view.eta_s)}")
    parts.append(f"{view.world_size or 0} workers")
    recoveries = len(view.recoveries)
    if recoveries:
        parts.append(f"{recoveries} recover{'y' if recoveries == 1 else 'ies'}")
    if view.state is not None and view.state.value != "RUNNING":
        parts.append(view.state.value)
    return " · ".join(parts)


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """A progress display for one wait; ``update`` it with the run's view."""

    def __init__(self, name: str, out: TextIO | None = None) -> None:
        self.name = name
        self.out = out or sys.stderr
        self.kind = "widget" if _in_kernel() else ("text" if _is_terminal(self.out) else "none")
        self._widget: Any = None
        self._last_draw = 0.0
        self.lines = 0  # redraws so far

    def update(self, view: RunView, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last_draw < 1 / _REDRAWS_PER_S:
            return
        self._last_draw = now
        line = f"{self.name}: {progress_line(view)}"
        self.lines += 1
        if self.kind == "widget":
            self._draw_widget(view, line)
        elif self.kind == "text":
            end = "\n" if final else ""
            self.out.write(f"\r{line}\x1b[K{end}")
            self.out.flush()

    def _draw_widget(self, view: RunView, line: str) -> None:
        import ipywidgets  # type: ignore[import-untyped]
        from IPython.display import display

        total = int(view.total_steps or 0)
        if self._widget is None:
            bar = ipywidgets.IntProgress(min=0, max=max(total, 1), value=0)
            label = ipywidgets.Label(value="")
            self._widget = (bar, label)
            display(ipywidgets.HBox([bar, label]))
        bar, label = self._widget
        bar.max = max(total, 1)
        bar.value = min(int(view.step or 0), bar.max)
        state = view.state.value if view.state is not None else ""
        bar.bar_style = {"COMPLETED": "success", "FAILED": "danger"}.get(state, "")
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
