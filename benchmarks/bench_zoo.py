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

Saves ``results/zoo.json`` (``_report.py``): a summary (one sample per kind) and a row
per kind, whose goal is the issue's: ft equal wherever Kishu or dill is, and never
silently different. A run of some kinds or some tools saves its own tables
(``-partial``), leaving those of the full run alone.

    .venv/bin/python benchmarks/bench_zoo.py [--arms ft,kishu,dill] [--kinds pd_frame,lock]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
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
from _report import Goal, Table, save

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


ARMS = ("ft", "kishu", "dill")
PEERS = {"kishu": "Kishu", "dill": "dill"}
TOOLS = {
    "kishu": "Kishu 0.3.4 (its commit after every cell)",
    "dill": "`dill.dump_session` after every cell",
}
EVERY = Goal("value", "==", 1, stat="all")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--kinds", default="", help="comma-separated zoo names (default: all)")
    args = parser.parse_args()
    arms = args.arms.split(",")
    if "ft" not in arms:
        parser.error("--arms: ft is what the tables are about")
    kinds = available()
    if args.kinds:
        kinds = [k for k in kinds if k.name in args.kinds.split(",")]
    root = Path(tempfile.mkdtemp(prefix="ft-bench-zoo-"))
    verdicts: dict[str, dict[str, str]] = {}
    for kind in kinds:
        verdicts[kind.name] = {arm: verdict(arm, kind, root) for arm in arms}
        shown = ", ".join(f"{a} {v}" for a, v in verdicts[kind.name].items())
        print(f"{kind.name} ({kind.library}): {shown}", file=sys.stderr, flush=True)
    partial = bool(args.kinds) or sorted(arms) != sorted(ARMS)
    save("zoo", "Kinds of notebook values after a crash", tables(kinds, verdicts, arms, partial))


def tables(
    kinds: list[ZooKind], verdicts: dict[str, dict[str, str]], arms: list[str], partial: bool
) -> list[Table]:
    peers = [a for a in arms if a in PEERS]
    suffix, note = ("-partial", " (a partial run)") if partial else ("", "")
    setup = (
        f"Each of {len(kinds)} kinds of the object zoo (`ft_notebook/testing/_zoo.py`) in a "
        "notebook of its own, once per tool: ft in auto mode"
        + "".join(f", {TOOLS[a]}" for a in peers)
        + "; SIGKILL, a restore in a fresh kernel, and the kind's variable compared with its "
        "value before by `NAMESPACE_HASHES` (each library's own view of its data). A kind "
        "counts as equal, lost (not in the namespace) or different (back, not equal, "
        "nothing said); one run."
    )
    summary = Table(f"summary{suffix}", f"All kinds{note}", setup)
    ft = {name: v["ft"] for name, v in verdicts.items()}
    matched = [n for n, v in verdicts.items() if any(v[a] == "equal" for a in peers)]
    if matched:
        summary.row(
            f"kind back equal where {' or '.join(PEERS[a] for a in peers)} is",
            "bool",
            [float(ft[n] == "equal") for n in matched],
            goal=EVERY,
            detail=_names("not", [n for n in matched if ft[n] != "equal"]),
        )
    summary.row(
        "kind not silently different",
        "bool",
        [float(v == "equal" or v == "lost") for v in ft.values()],
        goal=EVERY,
        detail=_names(
            "different or broke the cell", [n for n, v in ft.items() if v not in ("equal", "lost")]
        ),
    )
    for arm in peers:
        theirs = {name: v[arm] for name, v in verdicts.items()}
        equal = sum(v == "equal" for v in theirs.values())
        if not equal:  # nothing to divide by: no ratio to show
            continue
        summary.row(
            "kinds back equal",
            "count",
            [sum(v == "equal" for v in ft.values())],
            reference=[equal],
            reference_name=PEERS[arm],
            detail="; ".join(
                f"{PEERS[arm]} {what.lower()}: {', '.join(names)}"
                for what in ("lost", "DIFFERENT", "error")
                if (names := [n for n, v in theirs.items() if v.split(":")[0] == what])
            ),
        )
    per_kind = Table(
        f"kinds{suffix}",
        f"Kind by kind{note}",
        f"The same {len(kinds)} kinds, the same run: ft's verdict on each (1: back equal), "
        "then the kind's library and each peer's verdict; the goal is ft equal where a peer "
        "is, and not silently different where none is.",
    )
    for kind in kinds:
        v = verdicts[kind.name]
        detail = ", ".join([kind.library, *(f"{PEERS[a]} {v[a]}" for a in peers)])
        if kind.name in matched:
            per_kind.row(kind.name, "bool", [float(v["ft"] == "equal")], goal=EVERY, detail=detail)
        else:
            per_kind.row(
                f"{kind.name}: not silently different",
                "bool",
                [float(v["ft"] in ("equal", "lost"))],
                goal=EVERY,
                detail=detail,
            )
    return [summary, per_kind]


def _names(what: str, names: list[str]) -> str:
    return f"{what}: {', '.join(names)}" if names else ""


if __name__ == "__main__":
    main()
