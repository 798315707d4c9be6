"""Notebook snapshots against what users reach for instead: dill and Kishu.

Each of three notebooks (``_notebooks.py``) runs in a real kernel with a snapshot
after every cell, once per arm: no snapshots (the reference for pauses, memory and
re-running), ``%ft auto on``, ``dill.dump_session`` from a post-run hook (written to a
temporary file then renamed, so a failed dump keeps the last good one), and Kishu
(``init_kishu``). The kernel is then SIGKILLed, a fresh one restores, and every
variable is compared by content hash with its value before the kill.

The restore is repeated (``--repeat``, default 9), each time in a fresh kernel, and
each restore is paired with a re-run of the notebook without snapshots in a fresh
kernel, as "Run All" does it (every cell sent at once), the order alternating from
pair to pair. Every pair is saved (and goes to stderr): the awkward notebook takes
under 0.1 s either way, and one run scatters by 10-20 ms on a shared 2-core machine.
A variable counts as equal only when every restore brought it back equal.

ft_notebook's bytecode is compiled before the kernels start, as ``pip install``
does: where ``PYTHONDONTWRITEBYTECODE`` is set (this project's machines), a kernel
would otherwise compile every ft_notebook module it imports, some 50 ms of each
restore that an installed package never pays (``--no-compile`` leaves it out).

Bytes written are the kernel process's ``write_bytes`` (/proc/PID/io); pauses are a
cell's round trip minus the same cell's in the no-snapshot arm. ft writes auto
snapshots in the background: the harness waits for that writing after each cell
(outside the cell's time), so its bytes count with the cell that caused them.

Saves ``results/snapshots.json`` (``_report.py``), one table per notebook: ft against
running without snapshots, its re-run, dill and Kishu, each sample raw (one per cell,
restore or pair).

    .venv/bin/python benchmarks/bench_snapshots.py [etl training awkward] [--arms ft,dill,kishu]
        [--repeat 9] [--no-compile]
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _notebooks import NEW_COLUMN, NOTEBOOKS
from _peers import (
    WAIT_FT,
    environment,
    python_of,
    restore_cells,
    setup_cells,
    store_of,
    write_notebook,
)
from _report import Goal, Table, save

from ft_notebook.testing import NAMESPACE_HASHES, KernelSession, parse_hashes


@dataclass
class ArmResult:
    walls: list[float] = field(default_factory=list)
    written: list[int] = field(default_factory=list)
    column_bytes: int = 0  # of the column the cell before last adds (etl)
    peak_rss: int = 0
    store_size: int = 0
    restores_s: list[float] = field(default_factory=list)
    #: re-runs without snapshots, interleaved with the restores: restores_s[i] pairs
    #: with reruns_s[i]
    reruns_s: list[float] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # the variables compared
    equal: int = 0
    different: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


def _proc(pid: int, file: str, key: str) -> int:
    for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * (1024 if file == "status" else 1)
    raise KeyError(key)


def _hashes(kernel: KernelSession) -> dict[str, str]:
    out = kernel.execute(NAMESPACE_HASHES, silent=True, timeout=300).check().stdout
    return parse_hashes(out)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run_arm(
    arm: str, cells: list[str], root: Path, repeat: int, probe: str | None = None
) -> ArmResult:
    work = root / arm
    work.mkdir(parents=True)
    nb_path = work / "bench.ipynb"
    write_notebook(nb_path)
    env = environment(arm, work, nb_path)
    result = ArmResult()
    kernel = KernelSession(work / "kernel.log", cwd=work, env=env, python=python_of(arm)).start()
    try:
        for code in setup_cells(arm, work):
            kernel.execute(code, silent=True, timeout=300).check()
        for code in cells:
            before = _proc(kernel.pid, "io", "write_bytes")
            done = kernel.execute(code, timeout=600).check()
            result.walls.append(done.wall_s)
            if arm == "ft":  # its writing goes on in the background: count it with its cell
                kernel.execute(WAIT_FT, silent=True, timeout=600).check()
            result.written.append(_proc(kernel.pid, "io", "write_bytes") - before)
        result.peak_rss = _proc(kernel.pid, "status", "VmHWM")
        if probe is not None:
            shown = kernel.execute(f"print({probe})", silent=True, timeout=60).check()
            result.column_bytes = int(shown.stdout.split()[-1])
        if arm == "none":
            return result
        expected = _hashes(kernel)
        # before the restores: Kishu's database grows with each
        result.store_size = _size(store_of(arm, work))
        restore = restore_cells(arm, work, nb_path, env)
        restores = []
        for i in range(repeat):
            # pairs in alternating order, so that neither side gains from a drift in
            # the machine's speed
            if i % 2:
                result.reruns_s.append(_run_all(kernel, cells))
            kernel.kill()
            kernel.start()
            done = kernel.execute("\n".join(restore), silent=True, timeout=600)
            result.restores_s.append(done.wall_s)
            restores.append(_hashes(kernel))
            if not i % 2:
                result.reruns_s.append(_run_all(kernel, cells))
        _compare(expected, restores, result)
        return result
    finally:
        kernel.shutdown()


def _run_all(kernel: KernelSession, cells: list[str]) -> float:
    """Re-run the notebook in a fresh kernel as "Run All" does: every cell is sent at
    once and the kernel works through its queue. Seconds until the last goes idle."""
    kernel.kill()
    kernel.start()
    start = time.perf_counter()
    for code in cells[:-1]:
        kernel.send(code)
    sending = time.perf_counter() - start
    last = kernel.execute(cells[-1], timeout=600)
    last.check()  # a failing cell aborts the queue behind it, the last included
    return sending + last.wall_s  # from the first request to the last cell going idle


def _compare(expected: dict[str, str], restores: list[dict[str, str]], result: ArmResult) -> None:
    """Count the variables; one wrong or missing in any of the restores counts as such."""
    result.names = list(expected)
    for name, digest in expected.items():
        if any(name not in got for got in restores):
            result.lost.append(name)
        elif any(got[name] != digest for got in restores):
            result.different.append(name)
        else:
            result.equal += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("notebooks", nargs="*", default=list(NOTEBOOKS))
    parser.add_argument("--arms", default="ft,dill,kishu")
    parser.add_argument(
        "--repeat",
        type=int,
        default=9,
        help="restores per arm, each paired with a re-run, each in a fresh kernel",
    )
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="leave ft_notebook's bytecode as it is (where PYTHONDONTWRITEBYTECODE is set "
        "and nothing compiled it, the kernels compile each module they import)",
    )
    args = parser.parse_args()
    if not args.no_compile:
        import ft_notebook

        compileall.compile_dir(Path(ft_notebook.__file__).parent, quiet=1)
    arms = ["none", *args.arms.split(",")]
    root = Path(tempfile.mkdtemp(prefix="ft-bench-snapshots-"))
    tables = []
    for nb in args.notebooks:
        probe = NEW_COLUMN.get(nb)
        results = {arm: run_arm(arm, NOTEBOOKS[nb], root / nb, args.repeat, probe) for arm in arms}
        for arm in arms[1:]:
            r = results[arm]
            pairs = " ".join(
                f"{a * 1e3:.1f}/{b * 1e3:.1f}"
                for a, b in zip(r.restores_s, r.reruns_s, strict=True)
            )
            print(f"{nb} {arm} pairs, restore/re-run ms: {pairs}", file=sys.stderr, flush=True)
        if "ft" in results:
            tables.append(notebook_table(nb, results, args.repeat))
        else:
            print(f"{nb}: no ft arm, nothing to save", file=sys.stderr)
    if tables:
        save("snapshots", "Notebook snapshots", tables)


PEERS = {"dill": "dill", "kishu": "Kishu"}
PEER_SETUP = {
    "dill": "`dill.dump_session` after every cell (dill)",
    "Kishu": "Kishu 0.3.4's commit after every cell",
}
#: restore against re-running the notebook (issue 4: faster; issue 18: ETL <= 0.5x)
RESTORE_VS_RERUN = {"etl": 0.5}


def notebook_table(nb: str, results: dict[str, ArmResult], repeat: int) -> Table:
    """ft against no snapshots, its own re-runs, and the peers that ran."""
    ft, base = results["ft"], results["none"]
    peers = {PEERS[a]: r for a, r in results.items() if a in PEERS}
    pauses = _pauses(ft, base)
    table = Table(
        f"notebook-{nb}",
        f"The {nb} notebook",
        f"`_notebooks.py`'s {nb} notebook ({len(base.walls)} cells) in a real kernel, a "
        "snapshot after every cell: ft (`%ft auto on`) against no snapshots"
        + "".join(f", {PEER_SETUP[name]}" for name in peers)
        + f"; then SIGKILL and {repeat} restore{'s' * (repeat != 1)}, each in a fresh kernel "
        "and paired with a re-run of the notebook (Run All) in another, alternating. "
        "Pauses are a cell's round trip minus the same cell's without snapshots.",
    )
    vs_peers = _versus(table, ft, peers)
    table.row(
        "variable back equal in every restore",
        "bool",
        [float(name not in ft.different and name not in ft.lost) for name in ft.names],
        goal=Goal("value", "==", 1, stat="all"),
        detail=_missed(ft),
    )
    vs_peers(
        "variables back equal",
        "count",
        lambda r: [r.equal],
        detail=lambda r: _missed(r, ft),
    )
    table.row(
        "pause, small-change cell (last)",
        "s",
        pauses[-1:],
        goal=Goal("value", "<=", 0.05),
    )
    vs_peers(
        "written by the small-change cell",
        "KB",
        lambda r: [r.written[-1] / 1e3],
        goal=Goal("value", "<=", 1000),
    )
    if ft.column_bytes:
        vs_peers(
            "written by the cell adding one column, per byte of that column",
            "x",
            lambda r: [r.written[-2] / r.column_bytes],
            goal=Goal("value", "<=", 1.2),
        )
    table.row(
        "cell round trip",
        "s",
        ft.walls,
        reference=base.walls,
        reference_name="no snapshots",
        ratio="pairs",
    )
    vs_peers("pause per cell", "s", lambda r: _pauses(r, base))
    vs_peers(
        "written, whole notebook",
        "MB",
        lambda r: [sum(r.written) / 1e6],
        goals={"dill": Goal("ratio", "<=", 0.35)},
    )
    vs_peers("store on disk", "MB", lambda r: [r.store_size / 1e6])
    table.row(
        "restore",
        "s",
        ft.restores_s,
        reference=ft.reruns_s,
        reference_name="re-running the notebook",
        ratio="pairs",
        goal=Goal("ratio", "<=", RESTORE_VS_RERUN[nb])
        if nb in RESTORE_VS_RERUN
        else Goal("ratio", "<", 1),
    )
    vs_peers(
        "restore",
        "s",
        lambda r: r.restores_s,
        goals={"Kishu": Goal("ratio", "<=", 0.25)},
    )
    table.row(
        "peak RSS",
        "MB",
        [ft.peak_rss / 1e6],
        reference=[base.peak_rss / 1e6],
        reference_name="no snapshots",
        goal=Goal("ratio", "<=", 1.3),
    )
    vs_peers("peak RSS", "MB", lambda r: [r.peak_rss / 1e6])
    return table


def _pauses(r: ArmResult, base: ArmResult) -> list[float]:
    """A cell's round trip minus the same cell's without snapshots."""
    return [max(0.0, a - b) for a, b in zip(r.walls, base.walls, strict=True)]


def _missed(r: ArmResult, ft: ArmResult | None = None) -> str:
    """The variables not back equal, and those of a peer's own that ft has not."""
    parts = [f"different: {', '.join(r.different)}"] * bool(r.different)
    parts += [f"lost: {', '.join(r.lost)}"] * bool(r.lost)
    extra = [n for n in r.names if ft is not None and n not in ft.names]
    parts += [f"also counts its own: {', '.join(extra)}"] * bool(extra)
    return "; ".join(parts)


def _versus(table: Table, ft: ArmResult, peers: dict[str, ArmResult]) -> Callable[..., None]:
    """A function adding one row per peer: ft's samples against the peer's, of the same
    measure. ``goal`` (of ft's value) goes on the first such row, or on a row of its own
    when there is none; ``goals`` are ratio goals against one named peer."""

    def add(
        measure: str,
        unit: str,
        samples: Callable[[ArmResult], list[float]],
        goal: Goal | None = None,
        goals: dict[str, Goal] | None = None,
        detail: Callable[[ArmResult], str] = lambda r: "",
    ) -> None:
        ours = samples(ft)
        for name, r in peers.items():
            ref = samples(r)
            if statistics.median(ref) == 0:  # nothing to divide by: no ratio to show
                continue
            table.row(
                measure,
                unit,
                ours,
                reference=ref,
                reference_name=name,
                goal=(goals or {}).get(name) or goal,
                detail=f"{name} {detail(r)}" if detail(r) else "",
            )
            goal = None
        if goal is not None:
            table.row(measure, unit, ours, goal=goal)

    return add


if __name__ == "__main__":
    main()
