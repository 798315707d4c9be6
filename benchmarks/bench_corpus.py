"""Snapshots of public notebooks: ft against Kishu and dill on statsmodels' own examples.

The corpus is ``benchmarks/corpus/MANIFEST.json`` (laid out by ``corpus/build.py``):
statsmodels' example notebooks that run offline on the data statsmodels ships. Each
notebook runs, cell by cell, in a real kernel once per arm:

- ``rerun``: no snapshots: each cell's time, and the continuation cell generated from
  what the run left (``corpus/_in_kernel.py`` says the rule; written to
  ``corpus/continuations/<id>.txt``);
- ``ft-save``: ``%load_ext ft_notebook``, the cells, then ``%ft save``;
- ``ft-auto``: ``%ft auto on``, a snapshot after every cell, each cell's pause timed;
- ``kishu``: Kishu 0.3.4's commit after every cell (its own venv, ``_peers.py``);
- ``dill``: ``dill.dump_session`` after every cell.

Then, in each tool's kernel: every variable's content hash is taken from the live
values (``ft_notebook.testing.NAMESPACE_HASHES``: frames by pandas' hash, arrays by
their bytes, objects by their attributes), the continuation cell runs (silently: no
tool snapshots it), the kernel is SIGKILLed, a new kernel restores with the tool, the
hashes are taken again and the continuation runs again. A variable is equal, lost (ft:
named as lost by ``%ft restore`` or not), or different (silently, unless ft said it
changed). The continuation's printed lines are compared.

Results go to ``results/corpus.json``; the statsmodels packages (not a dependency of
ft_notebook) are installed on first use into ``benchmarks/.corpus-site`` and put on
the kernels' ``PYTHONPATH``.

    .venv/bin/python benchmarks/bench_corpus.py [ID ...] [--arms ft-save,ft-auto,kishu,dill]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "corpus"))

from _peers import WAIT_FT, environment, python_of, restore_cells, setup_cells, write_notebook  # noqa: E402
from _report import Table, save  # noqa: E402
from build import code_cells, entries  # noqa: E402

from ft_notebook.testing import NAMESPACE_HASHES, KernelSession, parse_hashes  # noqa: E402

SITE = HERE / ".corpus-site"
SITE_PACKAGES = ("statsmodels==0.15.0", "patsy==1.0.3")
IN_KERNEL = HERE / "corpus" / "_in_kernel.py"
CONTINUATIONS = HERE / "corpus" / "continuations"
RAW = HERE / "corpus" / "last-run.json"
ARMS = ("ft-save", "ft-auto", "kishu", "dill")
# an axes or other artist by its figure's pixels: the generic rule (attributes to a
# depth of 12) walks matplotlib's object graph for minutes
HASHES = NAMESPACE_HASHES.replace(
    "    if 'matplotlib.figure' in m and",
    "    if 'matplotlib.artist' in m and isinstance(v, m['matplotlib.artist'].Artist)"
    " and getattr(v, 'figure', None) is not None:\n        v = v.figure\n"
    "    if 'matplotlib.figure' in m and",
    1,
)
RUNPY = f"__import__('runpy').run_path({str(IN_KERNEL)!r})"
# "    name (type): lost: why", "    name (type): NOT restored, ...", and
# "    name: restored, but not as it was: ..." (no type, the colon right after the name)
FT_SAID = re.compile(r"^    (\w+)(?: \(.*?\): (?:lost|NOT restored)|: restored, but not)", re.M)


@dataclass
class ArmOutcome:
    cell_walls: list[float] = field(default_factory=list)
    failed_cells: list[int] = field(default_factory=list)
    pauses: list[float] = field(default_factory=list)
    restore_s: float = 0.0
    restore_error: str = ""
    equal: list[str] = field(default_factory=list)
    different: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    reported: list[str] = field(default_factory=list)  # ft named them lost or changed
    continuation_equal: bool = False
    continuation_diff: list[str] = field(default_factory=list)
    notes: str = ""


def corpus_site() -> Path:
    """statsmodels for the kernels, beside (not in) the project's venv."""
    if not (SITE / "statsmodels").exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(SITE),
                *SITE_PACKAGES,
            ],
            check=True,
        )
    return SITE


def _env(tool: str, work: Path, nb_path: Path) -> dict[str, str]:
    env = environment(tool, work, nb_path)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(corpus_site()), env.get("PYTHONPATH")]))
    env["MPLBACKEND"] = "Agg"
    return env


def _kernel(tool: str, work: Path) -> tuple[KernelSession, Path, dict[str, str]]:
    work.mkdir(parents=True)
    nb_path = work / "bench.ipynb"
    write_notebook(nb_path)
    env = _env(tool, work, nb_path)
    kernel = KernelSession(work / "kernel.log", cwd=work, env=env, python=python_of(tool))
    return kernel.start(), nb_path, env


def _run_cells(kernel: KernelSession, cells: list[str], out: ArmOutcome) -> None:
    for i, code in enumerate(cells):
        done = kernel.execute(code, timeout=600)
        out.cell_walls.append(done.wall_s)
        if done.status != "ok":
            out.failed_cells.append(i)
            out.notes += f"cell {i} failed: {done.error_name}: {str(done.error_value)[:150]}; "
        if "dill dump failed" in done.stdout:
            out.notes += f"cell {i}: {done.stdout.strip().splitlines()[-1]}; "


def rerun(nb: str, cells: list[str], root: Path) -> tuple[ArmOutcome, str]:
    """The notebook without snapshots, and its continuation cell."""
    out = ArmOutcome()
    kernel, _, _ = _kernel("none", root / "rerun")
    try:
        _run_cells(kernel, cells, out)
        made = kernel.execute(
            f"print({RUNPY}['continuation'](get_ipython().user_ns, get_ipython().user_ns_hidden))",
            silent=True,
            timeout=120,
        ).check()
        return out, made.stdout
    finally:
        kernel.shutdown()


def run_arm(arm: str, cells: list[str], cont: str, root: Path) -> ArmOutcome:
    tool = "ft" if arm.startswith("ft") else arm
    out = ArmOutcome()
    kernel, nb_path, env = _kernel(tool, root / arm)
    try:
        for code in setup_cells(tool, root / arm, auto=arm == "ft-auto"):
            kernel.execute(code, silent=True, timeout=300).check()
        if arm == "ft-auto":
            kernel.execute(f"{RUNPY}['time_ft_hooks'](get_ipython())", silent=True).check()
        _run_cells(kernel, cells, out)
        if arm == "ft-save":
            kernel.execute("%ft save", timeout=600).check()
        if tool == "ft":
            kernel.execute(WAIT_FT, silent=True, timeout=600).check()
        if arm == "ft-auto":
            shown = kernel.execute(f"print({RUNPY}['pauses'](get_ipython()))", silent=True)
            line = next(x for x in shown.check().stdout.splitlines() if x.startswith("FTPAUSES"))
            out.pauses = json.loads(line[len("FTPAUSES") :])
        # not the notebook's: the name Kishu's setup cell binds
        expected = {n: h for n, h in _hashes(kernel).items() if n != "init_kishu"}
        before = kernel.execute(cont, silent=True, timeout=600).stdout
        restore = "\n".join(restore_cells(tool, root / arm, nb_path, env))
        kernel.kill()
        kernel.start()
        done = kernel.execute(restore, silent=True, timeout=600)
        out.restore_s = done.wall_s
        if done.status != "ok":
            out.restore_error = f"{done.error_name}: {done.error_value}"
        if tool == "ft":
            out.reported = sorted(set(FT_SAID.findall(done.stdout)))
        got = _hashes(kernel)
        after = kernel.execute(cont, silent=True, timeout=600).stdout
        for name, digest in expected.items():
            bucket = (
                out.equal
                if got.get(name) == digest
                else out.lost
                if name not in got
                else out.different
            )
            bucket.append(name)
        out.continuation_equal = before == after
        b, a = before.splitlines(), after.splitlines()
        out.continuation_diff = [f"{x!r} -> {y!r}" for x, y in zip(b, a, strict=False) if x != y]
        if len(b) != len(a):
            out.continuation_diff.append(f"{len(b)} lines -> {len(a)} lines")
        return out
    finally:
        kernel.shutdown()


def _hashes(kernel: KernelSession) -> dict[str, str]:
    done = kernel.execute(HASHES, silent=True, timeout=600)
    return parse_hashes(done.check().stdout)


def unexplained(o: ArmOutcome) -> list[str]:
    """Variables that came back different or went missing without ft saying so."""
    return [n for n in o.different + o.lost if n not in o.reported]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("notebooks", nargs="*")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument(
        "--tables-only", action="store_true", help=f"save the tables of {RAW.name} again"
    )
    args = parser.parse_args()
    if args.tables_only:
        save("corpus", "Snapshots of public notebooks", tables(json.loads(RAW.read_text())))
        return
    import ft_notebook

    # as pip install does: kernels would otherwise compile each module they import
    # where PYTHONDONTWRITEBYTECODE is set, in every restore
    for folder in (Path(ft_notebook.__file__).parent, corpus_site()):
        compileall.compile_dir(folder, quiet=1)
    arms = args.arms.split(",")
    ids = args.notebooks or [str(e["id"]) for e in entries()]
    root = Path(tempfile.mkdtemp(prefix="ft-bench-corpus-"))
    CONTINUATIONS.mkdir(exist_ok=True)
    # notebooks named on the command line are added to the last run's
    raw: dict[str, dict[str, object]] = (
        json.loads(RAW.read_text()) if args.notebooks and RAW.exists() else {}
    )
    for nb in ids:
        start = time.perf_counter()
        cells = code_cells(nb)
        try:
            base, cont = rerun(nb, cells, root / nb)
        except Exception:
            print(f"{nb}: re-run failed\n{traceback.format_exc()}", file=sys.stderr, flush=True)
            continue
        (CONTINUATIONS / f"{nb}.txt").write_text(cont)
        results = {"rerun": base}
        for arm in arms:
            try:
                results[arm] = run_arm(arm, cells, cont, root / nb)
            except Exception:
                results[arm] = ArmOutcome(notes="harness failed: " + traceback.format_exc()[-400:])
        raw[nb] = {arm: asdict(o) for arm, o in results.items()}
        RAW.write_text(json.dumps(raw, indent=1) + "\n")
        print(
            f"{nb} ({len(cells)} cells, {time.perf_counter() - start:.0f} s): "
            + "; ".join(
                f"{arm} eq {len(o.equal)} diff {o.different} lost {o.lost} said {o.reported} "
                f"cont {'=' if o.continuation_equal else '!='} restore {o.restore_s:.2f}s "
                f"failed {o.failed_cells} {o.restore_error} {o.notes[:200]}"
                for arm, o in results.items()
                if arm != "rerun"
            ),
            file=sys.stderr,
            flush=True,
        )
    if raw:
        save("corpus", "Snapshots of public notebooks", tables(raw))


def tables(raw: dict[str, dict[str, object]]) -> list[Table]:
    from _tables import make_tables

    return make_tables(raw)


if __name__ == "__main__":
    main()
