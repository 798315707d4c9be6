"""An object zoo: the kinds of values real notebooks hold, one cell each.

Each :class:`ZooKind` is a cell that binds one variable, ``zoo_<name>``, to a value
of that kind, made the way a data scientist makes it. The snapshot tests run every
cell in a real kernel, snapshot, SIGKILL the kernel, restore in a new one and compare
each variable by :data:`NAMESPACE_HASHES` (which never uses ft_notebook's own
fingerprints); the snapshot benchmark runs the same cells with Kishu and dill. A
kind needs its library: :func:`available` leaves out those not installed.
:data:`ETL_NOTEBOOK` is the pandas notebook the same tests and benchmark run whole.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class ZooKind:
    """One kind of value: the cell that makes ``zoo_<name>`` and what it needs."""

    name: str
    library: str  # the import name the cell needs (its kind is skipped without it)
    code: str

    @property
    def variable(self) -> str:
        return f"zoo_{self.name}"


# One kind per "## name library" line, its cell below it; VAR is its variable. The
# data is big enough to be taken out of band (20,000 rows), small enough for make test.
_CELLS = r"""
# pandas, with each extension dtype
## pd_frame pandas
import numpy as np, pandas as pd
_r = np.random.default_rng(1)
VAR = pd.DataFrame({'x': _r.random(20000), 'i': _r.integers(0, 9, 20000, dtype=np.int16),
                     'name': _r.choice(['ann', 'bob', 'cy'], 20000)})
## pd_categorical pandas
import numpy as np, pandas as pd
VAR = pd.Series(pd.Categorical(np.random.default_rng(2).choice(['lo', 'mid', 'hi'], 20000),
                               categories=['lo', 'mid', 'hi'], ordered=True))
## pd_datetime_tz pandas
import pandas as pd
VAR = pd.Series(pd.date_range('2024-03-01', periods=20000, freq='min', tz='Europe/Paris'))
## pd_period pandas
import pandas as pd
VAR = pd.Series(pd.period_range('2020-01', periods=6000, freq='M'))
## pd_interval pandas
import pandas as pd
VAR = pd.Series(pd.interval_range(0, 6000, periods=6000))
## pd_nullable_int pandas
import pandas as pd
VAR = pd.Series(pd.array([i if i % 7 else None for i in range(20000)], dtype='Int64'))
## pd_boolean pandas
import pandas as pd
_v = [None if i % 5 == 0 else i % 2 == 0 for i in range(20000)]
VAR = pd.Series(pd.array(_v, dtype='boolean'))
## pd_string pandas
import pandas as pd
VAR = pd.Series([f'row {i}' if i % 9 else None for i in range(20000)], dtype='string[python]')
## pd_string_pyarrow pyarrow
import pandas as pd
VAR = pd.Series([f'row {i}' for i in range(20000)], dtype='string[pyarrow]')
## pd_sparse pandas
import numpy as np, pandas as pd
_d = np.zeros(20000); _d[::50] = 1.5
VAR = pd.Series(pd.arrays.SparseArray(_d))
## pd_multiindex pandas
import numpy as np, pandas as pd
_i = pd.MultiIndex.from_product([range(100), list('abcdefghij')], names=['n', 'l'])
VAR = pd.DataFrame({'v': np.arange(1000.0)}, index=_i)
## pd_index pandas
import pandas as pd
VAR = pd.Index([f'id-{i}' for i in range(20000)], name='ids')
# Arrow and polars
## pa_table pyarrow
import pyarrow as pa
VAR = pa.table({'a': pa.array(range(20000)), 's': pa.array([str(i) for i in range(20000)])})
## pa_array pyarrow
import pyarrow as pa
VAR = pa.array([float(i) if i % 3 else None for i in range(20000)])
## pl_frame polars
import polars as pl
VAR = pl.DataFrame({'a': list(range(20000)), 'b': [str(i % 13) for i in range(20000)]})
# scientific Python
## sp_csr scipy
import scipy.sparse as sps
VAR = sps.random(2000, 500, density=0.02, format='csr', random_state=3)
## sp_coo scipy
import scipy.sparse as sps
VAR = sps.random(800, 800, density=0.01, format='coo', random_state=4)
## sk_pipeline sklearn
import numpy as np
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.linear_model import LogisticRegression
_r = np.random.default_rng(5)
_X = _r.normal(size=(3000, 8)); _y = (_X[:, 0] + _X[:, 1] > 0).astype(int)
VAR = make_pipeline(StandardScaler(), LogisticRegression()).fit(_X, _y)
## sk_forest sklearn
import numpy as np
from sklearn.ensemble import RandomForestClassifier
_r = np.random.default_rng(6)
_X = _r.normal(size=(500, 4)); _y = (_X[:, 0] > 0).astype(int)
VAR = RandomForestClassifier(n_estimators=10, random_state=0).fit(_X, _y)
## xr_dataset xarray
import numpy as np, xarray as xr
VAR = xr.Dataset({'t': (('lat', 'lon'), np.random.default_rng(7).random((90, 180)))},
                 coords={'lat': np.linspace(-89, 89, 90), 'lon': np.linspace(-179, 179, 180)},
                 attrs={'units': 'K'})
## nx_graph networkx
import networkx as nx
VAR = nx.karate_club_graph()
## pil_image PIL
import numpy as np
from PIL import Image
VAR = Image.fromarray(np.random.default_rng(8).integers(0, 255, (120, 160, 3), dtype=np.uint8))
## mpl_figure matplotlib
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
VAR, _ax = plt.subplots(figsize=(3, 2))
_ax.plot([1, 3, 2, 4]); _ax.set_title('loss')
plt.close(VAR)
# torch
## torch_module torch
import torch
torch.manual_seed(0)
VAR = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
## torch_optimizer torch
import torch
torch.manual_seed(1)
_m = torch.nn.Linear(16, 4)
VAR = torch.optim.AdamW(_m.parameters(), lr=1e-3)
_m(torch.randn(8, 16)).sum().backward(); VAR.step()
## torch_scheduler torch
import torch
_o = torch.optim.SGD(torch.nn.Linear(4, 4).parameters(), lr=0.1)
VAR = torch.optim.lr_scheduler.StepLR(_o, step_size=3)
for _ in range(5): _o.step(); VAR.step()
## torch_generator torch
import torch
VAR = torch.Generator().manual_seed(42)
torch.rand(3, generator=VAR)
# numpy
## np_structured numpy
import numpy as np
VAR = np.zeros(3000, dtype=[('id', 'i4'), ('score', 'f8'), ('tag', 'U4')])
VAR['id'] = np.arange(3000); VAR['score'] = np.linspace(0, 1, 3000); VAR['tag'] = 'ab'
## np_object numpy
import numpy as np
VAR = np.array([{'k': i} if i % 2 else f's{i}' for i in range(2000)], dtype=object)
## np_datetime64 numpy
import numpy as np
VAR = np.arange('2024-01-01', '2024-12-31', dtype='datetime64[m]')
## np_generator numpy
import numpy as np
VAR = np.random.default_rng(9)
VAR.random(10)
# the standard library
## py_random random
import random
VAR = random.Random(10)
VAR.random()
## defaultdict_lambda collections
from collections import defaultdict
VAR = defaultdict(lambda: [0])
VAR['a'].append(1)
## ordered_counter_deque collections
from collections import Counter, OrderedDict, deque
VAR = (OrderedDict(b=1, a=2), Counter('mississippi'), deque(range(10), maxlen=5))
## namedtuple collections
from collections import namedtuple
Pair = namedtuple('Pair', 'left right')
VAR = Pair(1, [2, 3])
## dataclass dataclasses
from dataclasses import dataclass, field
@dataclass
class Run:
    name: str
    losses: list = field(default_factory=list)
VAR = Run('baseline', [0.9, 0.5])
## enum enum
import enum
class Stage(enum.Enum):
    TRAIN = 'train'
    EVAL = 'eval'
VAR = Stage.EVAL
## notebook_class builtins
class Accumulator:
    def __init__(self): self.total = 0
    def add(self, v): self.total += v; return self
VAR = Accumulator().add(3).add(4)
## closure builtins
def make_scaler(k):
    def scale(v): return v * k
    return scale
VAR = make_scaler(2.5)
## regex re
import re
VAR = re.compile(r'(?P<key>\w+)=(?P<value>\d+)', re.IGNORECASE)
## decimal_fraction decimal
from decimal import Decimal
from fractions import Fraction
VAR = (Decimal('3.14159265358979323846'), Fraction(22, 7))
## path pathlib
import pathlib
VAR = pathlib.Path('data') / 'raw' / 'events.parquet'
## open_file io
with open('zoo_file.txt', 'w') as _f: _f.write('one\ntwo\nthree\n')
VAR = open('zoo_file.txt')
VAR.readline()
## generator builtins
VAR = (i * i for i in range(100))
## lock threading
import threading
VAR = threading.Lock()
## sqlite sqlite3
import sqlite3
VAR = sqlite3.connect(':memory:')
VAR.execute('create table t (k text, v real)')
VAR.executemany('insert into t values (?, ?)', [('a', 1.5), ('b', 2.5)]); VAR.commit()
"""


def _parse(text: str) -> tuple[ZooKind, ...]:
    kinds = []
    for block in text.split("\n## ")[1:]:
        header, _, code = block.partition("\n")
        name, library = header.split()
        body = "\n".join(line for line in code.splitlines() if not line.startswith("# "))
        kinds.append(ZooKind(name, library, body.strip().replace("VAR", f"zoo_{name}")))
    return tuple(kinds)


ZOO: tuple[ZooKind, ...] = _parse(_CELLS)

# A realistic ETL notebook: 2 M rows from a seeded Generator with categorical,
# datetime, string and numeric columns, filtered, columns added in place, merged,
# a frame deleted, a .loc assignment; then one new column and a small change.
ETL_NOTEBOOK: tuple[str, ...] = (
    # 2 M rows from a seeded Generator: categorical, datetime, string and numeric columns
    """
import numpy as np, pandas as pd
rng = np.random.default_rng(2024)
n = 2_000_000
events = pd.DataFrame({
    'user': rng.integers(0, 300_000, n),
    'city': pd.Categorical(rng.choice(['paris', 'lyon', 'nantes', 'lille'], n)),
    'at': pd.Timestamp('2025-01-01') + pd.to_timedelta(rng.integers(0, 86_400 * 90, n), 's'),
    'amount': rng.gamma(2.0, 30.0, n).round(2),
    'channel': rng.choice(['web', 'app', 'store'], n),
})
""",
    "big = events[events.amount > 5].copy()",
    "big['day'] = big['at'].dt.floor('D')\nbig['net'] = big['amount'] * 0.8",
    """
users = pd.DataFrame({
    'user': np.arange(300_000),
    'segment': pd.Categorical(rng.choice(['new', 'loyal', 'churned'], 300_000)),
    'age': rng.integers(18, 90, 300_000).astype('int16'),
})
joined = big.merge(users, on='user', how='left')
""",
    "del big\nper_day = joined.groupby(['day', 'segment'], observed=True)['net'].sum()",
    "joined.loc[joined.channel == 'store', 'net'] = 0.0\ndraw = rng.random(3)",
    "events['fee'] = events['amount'] * 0.02",  # one new column of a 2 M-row frame
    "threshold = 75.0",  # a small change: what the pause goal is about
)


def available(kinds: tuple[ZooKind, ...] = ZOO) -> list[ZooKind]:
    """The kinds whose library is installed here."""
    return [k for k in kinds if k.library == "builtins" or importlib.util.find_spec(k.library)]
