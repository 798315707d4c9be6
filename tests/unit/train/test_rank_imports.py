"""A rank's threads never race torch's lazy imports (CI: drills failed at step 0 with
``_DeadlockError: ... _ModuleLock('torch._dynamo')`` on a worker without a preload)."""

from __future__ import annotations

import subprocess
import sys

# The first uses of an optimizer a rank's threads make concurrently (the training step
# and a checkpoint's state_dict): the modules they import are printed, one per line.
_FIRST_USE = """
import sys
import torch
{warm}
before = set(sys.modules)
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
opt = torch.optim.AdamW(model.parameters())
opt.state_dict()
opt.zero_grad()
loss = torch.nn.functional.cross_entropy(model(torch.ones(5, 3)), torch.zeros(5, dtype=torch.long))
loss.backward()
opt.step()
opt.load_state_dict(opt.state_dict())
print("\\n".join(sorted(set(sys.modules) - before)))
"""


def _imported_by_first_use(warm: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_USE.format(warm=warm)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(out.stdout.split())


def test_an_optimizers_first_use_imports_torch_dynamo_lazily() -> None:
    # the hazard this guards against: if torch stops importing lazily, the warm-up is moot
    assert "torch._dynamo" in _imported_by_first_use("")


def test_after_the_actors_warm_up_first_use_imports_nothing_that_can_deadlock() -> None:
    warm = "from ft_notebook.train.rank._actor import import_lazy_torch; import_lazy_torch()"
    late = _imported_by_first_use(warm)
    assert not {m for m in late if m.startswith(("torch._dynamo", "torch._inductor"))}, late
