"""Which kinds of notebook values come back after a kernel crash: ft against Kishu
and dill, kind by kind.

Each kind of the object zoo (``ft_notebook.testing._zoo``, the cells the snapshot
tests run) goes into a notebook of its own, once per tool (``_peers.py``: ft in auto
mode, ``dill.dump_session`` after every cell, Kishu's commit after every cell), in a
real kernel. The kernel is SIGKILLed, a fresh one restores the way the tool says to,
and the kind's variable is compared with its value before the kill by
``NAMESPACE_HASHES`` (each library's own view of its data, never ft's
fingerprints). A kind is **equal**, **lost** (not in the namespace: the tool said it
could not keep it, at the snapshot or the restore) or **DIFFERENT** (back, but not
equal, and nothing said so: the failure that must never happen). One notebook per
kind, so that one kind a tool cannot keep does not take the others with it (a failed
``dill.dump_session`` keeps none of the session).

    .venv/bin/python benchmarks/bench_zoo.py [--arms ft,kishu,dill] [--kinds pd_frame,lock]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _peers import (
    WAIT_FT,
    environment,
    python_of,
    restore_cells,
    setup_cells,
    write_notebook,
)

from ft_notebook.testing import NAMESPACE_HASHES, KernelSession, parse_hashes
from ft_notebook.testing._zoo import ZooKind, available


def verdict(arm: str, kind: ZooKind, root: Path) -> str:
    """equal | lost | DIFFERENT (or "error: ..." when the tool broke the notebook)."""
    work = root / arm / kind.name
    work.mkdir(parents=True)
    nb_path = work / "zoo.ipynb"
    write_notebook(nb_path)
    env = environment(arm, work, nb_path)
    kernel = KernelSession(work / "kernel.log", cwd=work, env=env, python=python_of(arm)).start()
    try:
        for code in setup_cells(arm, work):
            kernel.execute(code, silent=True, timeout=300).check()
        ran = kernel.execute(kind.code, timeout=300)
        if ran.status != "ok":  # the tool's hooks broke the cell itself
            return f"error: {ran.error_name}"
        if arm == "ft":
            kernel.execute(WAIT_FT, silent=True, timeout=300).check()
        out = kernel.execute(NAMESPACE_HASHES, silent=True, timeout=300).check().stdout
        before = parse_hashes(out)[kind.variable]
        kernel.kill()
        kernel.start()
        kernel.execute("\n".join(restore_cells(arm, work, nb_path, env)), silent=True, timeout=300)
        out = kernel.execute(NAMESPACE_HASHES, silent=True, timeout=300).check().stdout
        after = parse_hashes(out).get(kind.variable)
    finally:
        kernel.shutdown()
    if after is None:
        return "lost"
    return "equal" if after == before else "DIFFERENT"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arms", default="ft,kishu,dill")
    parser.add_argument("--kinds", default="", help="comma-separated zoo names (default: all)")
    args = parser.parse_args()
    arms = args.arms.split(",")
    kinds = available()
    if args.kinds:
        kinds = [k for k in kinds if k.name in args.kinds.split(",")]
    root = Path(tempfile.mkdtemp(prefix="ft-bench-zoo-"))
    print(f"| kind | library | {' | '.join(arms)} |")
    print(f"| --- | --- | {' | '.join('---' for _ in arms)} |")
    totals: dict[str, Counter[str]] = {arm: Counter() for arm in arms}
    short: list[str] = []  # kinds where ft is not equal but a peer is
    for kind in kinds:
        row = {arm: verdict(arm, kind, root) for arm in arms}
        for arm, v in row.items():
            totals[arm][v.split(":")[0]] += 1
        if "ft" in row and row["ft"] != "equal" and "equal" in row.values():
            short.append(kind.name)
        print(f"| {kind.name} | {kind.library} | {' | '.join(row[a] for a in arms)} |", flush=True)
    summary = " | ".join(
        f"{totals[a]['equal']} equal, {totals[a]['lost']} lost, {totals[a]['DIFFERENT']} different"
        + (f", {totals[a]['error']} broke the cell" if totals[a]["error"] else "")
        for a in arms
    )
    print(f"| **{len(kinds)} kinds** | | {summary} |")
    print(f"\nft not equal where a peer is: {', '.join(short) or 'none'}")


if __name__ == "__main__":
    main()
