"""Content hashes of a kernel's variables, computed inside the kernel.

What "the same variable" means for tests and benchmarks of snapshots, by each
library's own view of its data and never by ft_notebook's fingerprints: frames by
pandas' ``hash_pandas_object`` and their dtypes, Arrow data by its IPC bytes, polars
frames by their rows, arrays by their bytes (object arrays by their items), figures
by their rendered pixels, a SQLite database by its dump, objects by their attributes,
and what has no content (generators, locks, files) by their observable state: random
generators by the state their next draws come from, never by their pickle (numpy's
``RandomState`` pickles its seed sequence's entropy, which no draw uses, and the
same state pickles to other bytes depending on which dtype objects it shares).
No object is hashed by its pickle where its parts can be hashed: a bound method by
its function and the object it is bound to (its pickle holds that object's pickle,
random generators included: scipy's distributions keep their own methods in
``np.vectorize``), an object met again inside itself as a cycle, and a container or
object deeper than ``_ft_h``'s depth limit by its type alone (its pickle, the old
rule, holds all of it as bytes, pandas' internals and generators' seeds included).
Run :data:`NAMESPACE_HASHES` as a silent cell and read it with :func:`parse_hashes`.
"""

from __future__ import annotations

import json

NAMESPACE_HASHES = r"""
import hashlib as _h, json as _j, pickle as _p, sys as _s, types as _t
def _ft_sha(b):
    return _h.sha256(b if isinstance(b, bytes) else repr(b).encode()).hexdigest()[:32]
def _ft_code(c):
    consts = [_ft_code(x) if isinstance(x, _t.CodeType) else x for x in c.co_consts]
    return c.co_code + repr((c.co_qualname, c.co_names, consts)).encode()
_ft_busy = set()
def _ft_h(v, depth=0):
    m = _s.modules
    kind = type(v).__module__ + '.' + type(v).__qualname__
    if 'pandas' in m:
        _pd = m['pandas']
        if isinstance(v, (_pd.DataFrame, _pd.Series, _pd.Index)):
            data = _pd.util.hash_pandas_object(v, index=not isinstance(v, _pd.Index)).values.tobytes()
            meta = (list(v.columns), list(map(str, v.dtypes))) if isinstance(v, _pd.DataFrame) else (v.name, str(v.dtype))
            return 'pd:' + _ft_sha(data + repr((kind, meta, v.shape)).encode())
        if isinstance(v, _pd.api.extensions.ExtensionArray):
            return 'pdx:' + _ft_h(_pd.Series(v), depth + 1)
    if 'pyarrow' in m:
        _pa = m['pyarrow']
        if isinstance(v, (_pa.Array, _pa.ChunkedArray)):
            v = _pa.table({'a': v})
        if isinstance(v, (_pa.Table, _pa.RecordBatch)):
            sink = _pa.BufferOutputStream()
            with _pa.ipc.new_stream(sink, v.schema) as w:
                w.write(v.combine_chunks() if isinstance(v, _pa.Table) else v)
            return 'pa:' + _ft_sha(sink.getvalue().to_pybytes())
    if 'polars' in m:
        _pl = m['polars']
        if isinstance(v, _pl.Series):
            v = v.to_frame()
        if isinstance(v, _pl.DataFrame):
            rows = v.rows()
            return 'pl:' + _ft_sha(repr((v.schema, v.shape, rows)))
    if 'scipy.sparse' in m and m['scipy.sparse'].issparse(v):
        parts = [getattr(v, a) for a in ('data', 'indices', 'indptr', 'row', 'col', 'offsets') if hasattr(v, a)]
        return 'sp:' + _ft_sha(repr((kind, v.shape, v.dtype.str, [_ft_h(p, depth + 1) for p in parts])))
    if 'xarray' in m:
        _xr = m['xarray']
        if isinstance(v, _xr.DataArray):
            v = v.to_dataset(name=str(v.name))
        if isinstance(v, _xr.Dataset):
            return 'xr:' + _ft_sha(repr(sorted((str(k), x.dims, _ft_h(x.values, depth + 1), repr(x.attrs)) for k, x in v.variables.items())) + repr(v.attrs))
    if 'networkx' in m and isinstance(v, m['networkx'].Graph):
        return 'nx:' + _ft_sha(repr((kind, sorted(map(repr, v.nodes(data=True))), sorted(map(repr, v.edges(data=True))), v.graph)))
    if 'PIL.Image' in m and isinstance(v, m['PIL.Image'].Image):
        return 'img:' + _ft_sha(repr((v.mode, v.size)).encode() + v.tobytes())
    if 'matplotlib.figure' in m and isinstance(v, m['matplotlib.figure'].Figure):
        import io as _io
        _b = _io.BytesIO(); v.savefig(_b, format='rgba', dpi=40)
        return 'fig:' + _ft_sha(_b.getvalue())
    if 'torch' in m:
        _torch = m['torch']
        if isinstance(v, _torch.Generator):
            return 'tgen:' + _ft_sha(v.get_state().numpy().tobytes())
        if isinstance(v, _torch.Tensor):
            v = v.detach().cpu()
            return 'tt:' + _ft_sha(v.contiguous().view(-1).view(_torch.uint8).numpy().tobytes() + repr((tuple(v.shape), str(v.dtype), v.requires_grad)).encode())
    if 'numpy' in m:
        _np = m['numpy']
        if 'numpy.random' in m and isinstance(v, m['numpy.random'].Generator):
            return 'npgen:' + _ft_sha(repr(v.bit_generator.state))
        if 'numpy.random' in m and isinstance(v, m['numpy.random'].RandomState):
            return 'nprs:' + _ft_h(v.get_state(legacy=False), depth + 1)
        if isinstance(v, _np.ndarray):
            if v.dtype.hasobject:
                return 'ndo:' + _ft_sha(repr((v.shape, [_ft_h(x, depth + 1) for x in v.ravel().tolist()])))
            return 'nd:' + _ft_sha(_np.ascontiguousarray(v).tobytes() + repr((v.shape, repr(v.dtype))).encode())
        if isinstance(v, _np.generic):
            return 'nps:' + _ft_sha(repr((repr(v.dtype), v.tobytes())))
    if 'sqlite3' in m and isinstance(v, m['sqlite3'].Connection):
        return 'sql:' + _ft_sha('\n'.join(v.iterdump()))
    if 'random' in m and isinstance(v, m['random'].Random):
        return 'rnd:' + _ft_sha(repr(v.getstate()))
    if 'enum' in m and isinstance(v, m['enum'].Enum):
        return f'enum:{type(v).__qualname__}.{v.name}={v.value!r}'
    if isinstance(v, _t.GeneratorType):
        if v.gi_frame is None:
            return f'gen:{v.gi_code.co_qualname}:done'
        return f'gen:{v.gi_code.co_qualname}:{v.gi_frame.f_lasti}:' + _ft_h(dict(v.gi_frame.f_locals), depth + 1)
    if hasattr(v, 'locked') and callable(v.locked):
        return f'lock:{v.locked()}'
    if hasattr(v, 'closed') and hasattr(v, 'mode') and hasattr(v, 'name'):
        return f'file:{v.name}:{v.mode}:{v.closed or v.tell()}'
    if isinstance(v, _t.MethodType):
        return 'bm:' + _ft_h(v.__func__, depth + 1) + ':' + _ft_h(v.__self__, depth + 1)
    if isinstance(v, _t.FunctionType):
        cells = [c.cell_contents for c in v.__closure__ or ()]
        return 'fn:' + _ft_sha(_ft_code(v.__code__) + _ft_h(cells, depth + 1).encode())
    if isinstance(v, type):
        return 'cls:' + v.__qualname__ + ':' + _ft_sha(repr(sorted(k for k in vars(v) if not k.startswith('__'))))
    if hasattr(v, 'state_dict') and callable(v.state_dict) and depth < 12:
        return 'sd:' + _ft_h(v.state_dict(), depth + 1)
    if 'collections' in m and isinstance(v, m['collections'].defaultdict) and depth < 12:
        return 'dd:' + _ft_h(v.default_factory, depth + 1) + _ft_h(dict(v), depth + 1)
    if isinstance(v, dict) and depth < 12:
        return 'd:' + kind + _ft_sha(repr(sorted((repr(k), _ft_h(x, depth + 1)) for k, x in v.items())))
    if isinstance(v, (set, frozenset)) and depth < 12:
        return 's:' + kind + _ft_sha(repr(sorted(_ft_h(x, depth + 1) for x in v)))
    if isinstance(v, (list, tuple)) and depth < 12:
        return 'l:' + kind + _ft_sha(repr([_ft_h(x, depth + 1) for x in v]))
    if hasattr(v, '__dict__') and not isinstance(v, type) and depth < 12:
        if id(v) in _ft_busy:
            return 'cyc:' + kind
        _ft_busy.add(id(v))
        try:
            return 'o:' + kind + _ft_h(vars(v), depth + 1)
        finally:
            _ft_busy.discard(id(v))
    if depth >= 12 and (hasattr(v, '__dict__') or isinstance(v, (dict, list, tuple, set, frozenset))):
        return 'deep:' + kind
    try:
        return 'p:' + _ft_sha(_p.dumps(v))
    except Exception:
        return 'r:' + kind
print('FTHASH' + _j.dumps({k: _ft_h(v) for k, v in sorted(globals().items())
    if not k.startswith('_') and k not in ('In', 'Out', 'exit', 'quit', 'get_ipython', 'open')
    and not isinstance(v, _t.ModuleType)}))
"""


def parse_hashes(stdout: str) -> dict[str, str]:
    """The name -> hash mapping the cell printed."""
    line = next(x for x in stdout.splitlines() if x.startswith("FTHASH"))
    return dict(json.loads(line[len("FTHASH") :]))
