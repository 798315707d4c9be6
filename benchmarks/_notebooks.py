"""Three notebooks for the snapshot benchmark, as lists of cells.

- ``etl``: the ETL notebook of the snapshot tests (``ft_notebook.testing._zoo``): 2 M
  rows with categorical, datetime and string columns, filtered, merged, columns added;
- ``training``: a torch model, optimizer and LR scheduler mutated across cells;
- ``awkward``: generators, a lock, an open file, a lambda, a notebook-defined class
  and a numpy view of a big array that is mutated in place.

Each ends with a cell that changes only a small variable, the case the pause and
bytes-written goals are about.
"""

from __future__ import annotations

from ft_notebook.testing._zoo import ETL_NOTEBOOK

ETL = list(ETL_NOTEBOOK)

TRAINING = [
    "import torch\ntorch.manual_seed(0)\nx = torch.randn(8192, 256)\ny = (x[:, :8].sum(1) > 0).long()",
    "model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),"
    " torch.nn.ReLU(), torch.nn.Linear(512, 2))",
    "opt = torch.optim.Adam(model.parameters(), lr=1e-3)\n"
    "sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)",
    "losses = []\nfor i in range(0, 8192, 512):\n    opt.zero_grad()\n"
    "    loss = torch.nn.functional.cross_entropy(model(x[i:i+512]), y[i:i+512])\n"
    "    loss.backward(); opt.step(); losses.append(loss.item())\nsched.step()",
    "for i in range(0, 8192, 512):\n    opt.zero_grad()\n"
    "    loss = torch.nn.functional.cross_entropy(model(x[i:i+512]), y[i:i+512])\n"
    "    loss.backward(); opt.step(); losses.append(loss.item())\nsched.step()",
    "epoch = 2",
]

AWKWARD = [
    "import numpy as np, threading, random\nrandom.seed(3)\nbase = np.zeros(20_000_000)",
    "window = base[1000:2000]\nscale = lambda v: v * 3",
    "class Tracker:\n    def __init__(self):\n        self.seen = []\n"
    "    def add(self, v):\n        self.seen.append(v)\ntracker = Tracker()\ntracker.add(1)",
    "squares = (i * i for i in range(100))\nguard = threading.Lock()\nnoise = random.random()",
    "log = open('bench_log.txt', 'w')\nlog.write('started\\n')\nlog.flush()",
    "base[1500] = 42.0  # seen through window",
    "note = 'small change'",
]

# the bytes of the column the cell before last adds: what writing it should cost
NEW_COLUMN = {"etl": "events['fee'].to_numpy().nbytes"}

NOTEBOOKS = {"etl": ETL, "training": TRAINING, "awkward": AWKWARD}
