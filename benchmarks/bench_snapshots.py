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
pair to pair. The table gives the medians of both and how many pairs the restore
won (each pair's two times go to stderr): the awkward notebook takes under 0.1 s
either way, and one run scatters by 10-20 ms on a shared 2-core machine. A variable
counts as equal only when every restore brought it back equal.

ft_notebook's bytecode is compiled before the kernels start, as ``pip install``
does: where ``PYTHONDONTWRITEBYTECODE`` is set (this project's machines), a kernel
would otherwise compile every ft_notebook module it imports, some 50 ms of each
restore that an installed package never pays (``--no-compile`` leaves it out).

Bytes written are the kernel process's ``write_bytes`` (/proc/PID/io); pauses are a
cell's round trip minus the same cell's in the no-snapshot arm. ft writes auto
snapshots in the background: the harness waits for that writing after each cell
(outside the cell's time), so its bytes count with the cell that caused them.

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
    print(
        "| notebook | arm | pause median (ms) | pause last cell (ms) | written (MB) | "
        "written last cell (KB) | store (MB) | restore (s) | re-run (s) | restore faster in | "
        "equal / different / lost | peak RSS vs none |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    column: dict[str, float] = {}
    for nb in args.notebooks:
        probe = NEW_COLUMN.get(nb)
        results = {arm: run_arm(arm, NOTEBOOKS[nb], root / nb, args.repeat, probe) for arm in arms}
        base = results["none"]
        reruns = [t for r in results.values() for t in r.reruns_s] or [sum(base.walls)]
        print(
            f"| {nb} | none | – | – | {sum(base.written) / 1e6:.1f} | – | – | – | "
            f"{statistics.median(reruns):.3f} | – | – | 1.00 |"
        )
        for arm in arms[1:]:
            r = results[arm]
            pauses = [max(0.0, a - b) for a, b in zip(r.walls, base.walls, strict=True)]
            faster = sum(a < b for a, b in zip(r.restores_s, r.reruns_s, strict=True))
            lost = ",".join(r.lost) or "-"
            diff = ",".join(r.different) or "-"
            print(
                f"| {nb} | {arm} | {statistics.median(pauses) * 1e3:.0f} | {pauses[-1] * 1e3:.0f} | "
                f"{sum(r.written) / 1e6:.1f} | {r.written[-1] / 1e3:.0f} | {r.store_size / 1e6:.1f} | "
                f"{statistics.median(r.restores_s):.3f} | {statistics.median(r.reruns_s):.3f} | "
                f"{faster} of {len(r.restores_s)} | {r.equal} / {diff} / {lost} | "
                f"{r.peak_rss / base.peak_rss:.2f} |",
                flush=True,
            )
            if probe is not None:
                column[arm] = r.written[-2] / r.column_bytes
            pairs = " ".join(
                f"{a * 1e3:.1f}/{b * 1e3:.1f}"
                for a, b in zip(r.restores_s, r.reruns_s, strict=True)
            )
            print(f"{nb} {arm} pairs, restore/re-run ms: {pairs}", file=sys.stderr, flush=True)
    if column:
        ratios = ", ".join(f"{arm} {ratio:.2f}" for arm, ratio in column.items())
        print(
            f"\netl: bytes written by the cell that adds one column / that column's bytes: {ratios}"
        )


if __name__ == "__main__":
    main()
