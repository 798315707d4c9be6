"""Notebook snapshots against what users reach for instead: dill and Kishu.

Each of three notebooks (``_notebooks.py``) runs in a real kernel with a snapshot
after every cell, once per arm: no snapshots (the reference for pauses, memory and
re-running), ``%ft auto on``, ``dill.dump_session`` from a post-run hook (written to a
temporary file then renamed, so a failed dump keeps the last good one), and Kishu
(``init_kishu``). The kernel is then SIGKILLed, a fresh one restores, and every
variable is compared by content hash with its value before the kill.

ft_notebook's bytecode is compiled before the kernels start, as ``pip install``
does: where ``PYTHONDONTWRITEBYTECODE`` is set (this project's machines), a kernel
would otherwise compile every ft_notebook module it imports, some 50 ms of each
restore that an installed package never pays (``--no-compile`` leaves it out).

Bytes written are the kernel process's ``write_bytes`` (/proc/PID/io); pauses are a
cell's round trip minus the same cell's in the no-snapshot arm. ft writes auto
snapshots in the background: the harness waits for that writing after each cell
(outside the cell's time), so its bytes count with the cell that caused them.

    .venv/bin/python benchmarks/bench_snapshots.py [etl training awkward] [--arms ft,dill,kishu]
        [--no-compile]
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _notebooks import NOTEBOOKS

from ft_notebook.testing import NAMESPACE_HASHES, KernelSession, parse_hashes

# leaves no name behind: the namespace compared after the restore is the notebook's own
WAIT_FT = "__import__('ft_notebook.magics').magics.snapshots_of(get_ipython()).session.wait()"

DILL_HOOK = """
import dill as _dill, os as _os
def _ft_bench_dump(result):
    try:
        _dill.dump_session('{path}.tmp')
        _os.replace('{path}.tmp', '{path}')
    except Exception as e:
        print('dill dump failed:', type(e).__name__, e)
get_ipython().events.register('post_run_cell', _ft_bench_dump)
"""


@dataclass
class ArmResult:
    walls: list[float] = field(default_factory=list)
    written: list[int] = field(default_factory=list)
    peak_rss: int = 0
    store_size: int = 0
    restore_s: float = float("nan")
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


def run_arm(arm: str, cells: list[str], root: Path) -> ArmResult:
    work = root / arm
    work.mkdir(parents=True)
    nb_path = work / "bench.ipynb"
    _write_notebook(nb_path)
    env = dict(
        os.environ,
        JPY_SESSION_NAME=str(nb_path),
        DASK_FT_NOTEBOOK__DATA_DIR=str(work / "ft-data"),
        TEST_NOTEBOOK_PATH=str(nb_path),
        ENV_KISHU_TEST_MODE="1",
        KISHU_PATH_ROOT=str(work / "kishu-root"),
        IPYTHONDIR=str(work / "ipython"),
        JUPYTER_RUNTIME_DIR=str(work / "runtime"),
    )
    setup = {
        "none": [],
        "ft": ["%load_ext ft_notebook", "%ft auto on"],
        "dill": [DILL_HOOK.format(path=work / "session.pkl")],
        "kishu": ["from kishu import init_kishu; init_kishu()"],
    }[arm]
    result = ArmResult()
    kernel = KernelSession(work / "kernel.log", cwd=work, env=env).start()
    try:
        for code in setup:
            kernel.execute(code, silent=True, timeout=300).check()
        for code in cells:
            before = _proc(kernel.pid, "io", "write_bytes")
            done = kernel.execute(code, timeout=600).check()
            result.walls.append(done.wall_s)
            if arm == "ft":  # its writing goes on in the background: count it with its cell
                kernel.execute(WAIT_FT, silent=True, timeout=600).check()
            result.written.append(_proc(kernel.pid, "io", "write_bytes") - before)
        result.peak_rss = _proc(kernel.pid, "status", "VmHWM")
        expected = _hashes(kernel)
        if arm == "none":
            return result
        head = _kishu_head(nb_path) if arm == "kishu" else None
        kernel.kill()
        kernel.start()
        start = time.perf_counter()
        # one cell, as a user types it after a crash (the README's restore cell)
        restore = {
            "ft": ["%load_ext ft_notebook", "%ft restore"],
            "dill": [f"import dill; dill.load_session({str(work / 'session.pkl')!r})"],
            "kishu": ["from kishu import init_kishu; init_kishu()", f"_kishu.checkout({head!r})"],
        }[arm]
        kernel.execute("\n".join(restore), silent=True, timeout=600)
        result.restore_s = time.perf_counter() - start
        got = _hashes(kernel)
        result.store_size = _size(
            {"ft": work / "ft-data", "dill": work / "session.pkl", "kishu": work / "bench.kishudb"}[
                arm
            ]
        )
        for name, digest in expected.items():
            if name not in got:
                result.lost.append(name)
            elif got[name] != digest:
                result.different.append(name)
            else:
                result.equal += 1
        return result
    finally:
        kernel.shutdown()


def _kishu_head(nb_path: Path) -> str:
    from kishu.commands import KishuCommand

    return str(KishuCommand.log_all(nb_path).head.commit_id)


def _write_notebook(path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, str(path))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("notebooks", nargs="*", default=list(NOTEBOOKS))
    parser.add_argument("--arms", default="ft,dill,kishu")
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
    os.environ.setdefault("KISHU_PATH_ROOT", str(root / "kishu-driver"))
    print(
        "| notebook | arm | pause median (ms) | pause last cell (ms) | written (MB) | "
        "written last cell (KB) | store (MB) | restore (s) | equal / different / lost | "
        "peak RSS vs none |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for nb in args.notebooks:
        results = {arm: run_arm(arm, NOTEBOOKS[nb], root / nb) for arm in arms}
        base = results["none"]
        print(
            f"| {nb} | none (re-run) | – | – | {sum(base.written) / 1e6:.1f} | – | – | "
            f"{sum(base.walls):.3f} (re-run) | – | 1.00 |"
        )
        for arm in arms[1:]:
            r = results[arm]
            pauses = [max(0.0, a - b) for a, b in zip(r.walls, base.walls, strict=True)]
            lost = ",".join(r.lost) or "-"
            diff = ",".join(r.different) or "-"
            print(
                f"| {nb} | {arm} | {statistics.median(pauses) * 1e3:.0f} | {pauses[-1] * 1e3:.0f} | "
                f"{sum(r.written) / 1e6:.1f} | {r.written[-1] / 1e3:.0f} | {r.store_size / 1e6:.1f} | "
                f"{r.restore_s:.3f} | {r.equal} / {diff} / {lost} | {r.peak_rss / base.peak_rss:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
