"""The report's tables from ``bench_corpus.py``'s raw outcomes (``last-run.json``).

One sample per notebook unless a row says otherwise; the details name the notebook and
the variable or cell behind every miss.
"""

from __future__ import annotations

from typing import Any

from _report import Goal, Table

FT = {"ft-save": "ft explicit save", "ft-auto": "ft auto"}
PEERS = {"kishu": "Kishu", "dill": "dill"}
RERUN_FLOOR_S = 1.0  # restore against re-run only where the re-run takes longer
#: names a tool's own setup cell binds (Kishu's ``from kishu import init_kishu``)
TOOL_NAMES = frozenset({"init_kishu"})


def _unexplained(o: dict[str, Any]) -> list[str]:
    return [n for n in o["different"] + o["lost"] if n not in o["reported"]]


def _equal(o: dict[str, Any]) -> set[str]:
    return set(o["equal"]) - TOOL_NAMES


def _ran(raw: dict[str, dict[str, Any]], arm: str) -> dict[str, dict[str, Any]]:
    """The notebooks where ``arm`` got as far as a restore."""
    return {
        nb: r[arm] for nb, r in raw.items() if arm in r and "harness failed" not in r[arm]["notes"]
    }


def make_tables(raw: dict[str, dict[str, Any]]) -> list[Table]:
    return [_correctness(raw), _pauses(raw), _restore(raw)]


def _correctness(raw: dict[str, dict[str, Any]]) -> Table:
    table = Table(
        "corpus-restored",
        "What came back after a SIGKILL",
        f"{len(raw)} of statsmodels' example notebooks (`benchmarks/corpus/MANIFEST.json`), "
        "cell by cell in a real kernel per tool, then a SIGKILL and a restore in a new "
        "kernel; every variable's content hash (`NAMESPACE_HASHES`) from the live value "
        "against the restored one, and a continuation cell generated from the notebook's "
        "variables (`corpus/_in_kernel.py`) run before the kill and after the restore. "
        "One sample per notebook.",
    )
    for arm, name in FT.items():
        runs = _ran(raw, arm)
        if not runs:
            continue
        misses = {nb: _unexplained(o) for nb, o in runs.items()}
        table.row(
            f"{name}: variables different or lost without ft saying so",
            "count",
            [len(v) for v in misses.values()],
            goal=Goal("value", "==", 0, stat="all"),
            detail=_names(misses),
        )
        cont = {nb: o["continuation_equal"] or bool(o["reported"]) for nb, o in runs.items()}
        table.row(
            f"{name}: continuation output equal (or ft named a variable it lost)",
            "bool",
            [float(v) for v in cont.values()],
            goal=Goal("value", "==", 1, stat="all"),
            detail=_names(
                {nb: runs[nb]["continuation_diff"][:2] for nb, ok in cont.items() if not ok}
            ),
        )
        for peer, peer_name in PEERS.items():
            both = {nb: (o, raw[nb][peer]) for nb, o in runs.items() if peer in raw[nb]}
            if not both:
                continue
            short = {nb: sorted(_equal(p) - _equal(o)) for nb, (o, p) in both.items()}
            table.row(
                f"{name}: back equal wherever {peer_name} is",
                "bool",
                [float(not v) for v in short.values()],
                goal=Goal("value", "==", 1, stat="all"),
                detail=_names(short),
            )
    ft = _ran(raw, "ft-auto")
    for peer, peer_name in PEERS.items():
        both = [nb for nb in ft if peer in raw[nb]]
        if not both:
            continue
        table.row(
            "variables back equal (ft auto)",
            "count",
            [len(_equal(ft[nb])) for nb in both],
            reference=[len(_equal(raw[nb][peer])) for nb in both],
            reference_name=peer_name,
            detail=_peer_trouble(raw, peer, both),
        )
        table.row(
            "continuation output equal (ft auto)",
            "bool",
            [float(ft[nb]["continuation_equal"]) for nb in both],
            reference=[float(raw[nb][peer]["continuation_equal"]) for nb in both],
            reference_name=peer_name,
        )
    return table


def _pauses(raw: dict[str, dict[str, Any]]) -> Table:
    runs = {nb: o for nb, o in _ran(raw, "ft-auto").items() if o["pauses"]}
    table = Table(
        "corpus-pauses",
        "Auto-snapshot pauses on the corpus",
        "`%ft auto on`: ft's own work around each cell (its pre- and post-run hooks, "
        "timed in the kernel) against the cell's own time (its round trip less that "
        "pause). Issue 34's goals.",
    )
    cell_s = {
        nb: [w - p for w, p in zip(o["cell_walls"], o["pauses"], strict=False)]
        for nb, o in runs.items()
    }
    share = {nb: sum(o["pauses"]) / max(sum(cell_s[nb]), 1e-9) for nb, o in runs.items()}
    every = [p for o in runs.values() for p in o["pauses"]]
    total = sum(every) / max(sum(sum(c) for c in cell_s.values()), 1e-9)
    table.row("Σ pause / Σ cell time, whole corpus", "x", [total], goal=Goal("value", "<=", 0.1))
    table.row(
        "Σ pause / Σ cell time, per notebook",
        "x",
        list(share.values()),
        goal=Goal("value", "<=", 0.1, stat="all"),
        detail=", ".join(f"{nb} {v:.2f}" for nb, v in share.items() if v > 0.1),
    )
    worst = {
        nb: max(range(len(o["pauses"])), key=o["pauses"].__getitem__) for nb, o in runs.items()
    }
    table.row("pause of a cell (every cell)", "s", every, goal=Goal("value", "<=", 0.05))
    table.row(
        "worst pause of a cell",
        "s",
        every,
        goal=Goal("value", "<=", 0.3, stat="max"),
        detail=", ".join(
            f"{nb} cell {i}: {runs[nb]['pauses'][i] * 1e3:.0f} ms"
            for nb, i in worst.items()
            if runs[nb]["pauses"][i] > 0.3
        ),
    )
    return table


def _restore(raw: dict[str, dict[str, Any]]) -> Table:
    table = Table(
        "corpus-restore",
        "Restore time on the corpus",
        "The restore cell in a new kernel after the SIGKILL, one per notebook and tool "
        "(ft: `%load_ext ft_notebook` + `%ft restore`; Kishu: `init_kishu()` + "
        "`checkout` of its newest commit; dill: `dill.load_session`), paired per notebook; "
        "a restore that raised, or brought back nothing the notebook made, is left out. The re-run is the sum of the notebook's cell "
        f"times without snapshots, for notebooks whose re-run takes over {RERUN_FLOOR_S:g} s.",
    )
    for arm, name in FT.items():
        runs = {nb: o for nb, o in _ran(raw, arm).items() if not o["restore_error"]}
        for peer, peer_name in PEERS.items():
            pairs = [
                nb
                for nb in runs
                if peer in raw[nb] and not raw[nb][peer]["restore_error"] and _equal(raw[nb][peer])
            ]
            if not pairs:
                continue
            table.row(
                f"restore, {name}",
                "s",
                [runs[nb]["restore_s"] for nb in pairs],
                reference=[raw[nb][peer]["restore_s"] for nb in pairs],
                reference_name=peer_name,
                ratio="pairs",
                goal=Goal("ratio", "<=", 0.25) if peer == "kishu" else None,
            )
        long = [nb for nb in runs if sum(raw[nb]["rerun"]["cell_walls"]) > RERUN_FLOOR_S]
        if long:
            table.row(
                f"restore, {name}, against re-running the notebook",
                "s",
                [runs[nb]["restore_s"] for nb in long],
                reference=[sum(raw[nb]["rerun"]["cell_walls"]) for nb in long],
                reference_name="re-run",
                ratio="pairs",
                goal=Goal("ratio", "<=", 0.1),
            )
    return table


def _names(by_nb: dict[str, list[str]]) -> str:
    return "; ".join(f"{nb}: {', '.join(v)}" for nb, v in by_nb.items() if v)


def _peer_trouble(raw: dict[str, dict[str, Any]], peer: str, nbs: list[str]) -> str:
    """Why a peer brought little back: its restore raised, or its cells failed."""
    out = []
    for nb in nbs:
        o = raw[nb][peer]
        if o["restore_error"]:
            out.append(f"{nb}: restore raised {o['restore_error'][:80]}")
        elif o["failed_cells"]:
            out.append(f"{nb}: {len(o['failed_cells'])} cells failed under it")
    return "; ".join(out)
