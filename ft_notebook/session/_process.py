"""Process-wide state a notebook's next cell depends on, kept with each snapshot.

A seeded notebook draws its next numbers from generators no variable names:
``random``'s, numpy's legacy global ``np.random`` and torch's default CPU (and CUDA)
generators; its next figure follows matplotlib's ``rcParams``. A restore that puts
the variables back but leaves these where a fresh kernel starts makes the next cell
give other numbers and other figures. Each snapshot holds their state as it was
when it was taken, and ``%ft restore`` puts it back (``--no-global-state`` leaves
the new kernel's as they are). Only what the dead kernel had loaded is kept: a
notebook that never imported torch does not make the restore import it.
"""

from __future__ import annotations

import base64
import pickle
import sys
from collections.abc import Mapping
from typing import Any

from ft_notebook.session._namespace import capture_rng, restore_rng

# rcParams that belong to the kernel, not to the notebook's figures
_KERNEL_RC = frozenset({"backend", "backend_fallback", "interactive"})


def capture_process() -> dict[str, Any]:
    """The random generators' states and the rcParams changed from the defaults."""
    state: dict[str, Any] = {"rng": capture_rng()}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        states = torch.cuda.get_rng_state_all()
        state["cuda"] = [base64.b64encode(s.numpy().tobytes()).decode() for s in states]
    matplotlib = sys.modules.get("matplotlib")
    if matplotlib is not None:
        params, defaults = matplotlib.rcParams, matplotlib.rcParamsDefault
        changed = {}
        for key in params:
            if key in _KERNEL_RC:
                continue
            value = params[key]
            if key not in defaults or value != defaults[key]:
                changed[key] = value
        try:
            state["rcparams"] = base64.b64encode(pickle.dumps(changed)).decode()
        except Exception:  # a setting pickle cannot carry (a callable): none of them
            state["rcparams_error"] = "matplotlib's rcParams could not be pickled"
    return state


def restore_process(state: Mapping[str, Any]) -> list[str]:
    """Put back what :func:`capture_process` took; returns what was put back."""
    done = []
    rng = state.get("rng", {})
    restore_rng(rng)
    names = {"python": "random", "numpy": "numpy.random", "torch": "torch"}
    done += [names[k] for k in ("python", "numpy", "torch") if k in rng]
    if "cuda" in state:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() >= len(state["cuda"]):
            for device, raw in enumerate(state["cuda"]):
                data = torch.frombuffer(bytearray(base64.b64decode(raw)), dtype=torch.uint8)
                torch.cuda.set_rng_state(data.clone(), device)
            done.append("torch.cuda")
    if "rcparams" in state:
        import matplotlib

        changed = pickle.loads(base64.b64decode(state["rcparams"]))
        matplotlib.rcParams.update(changed)
        done.append("matplotlib.rcParams")
    return done
