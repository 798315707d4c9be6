"""Text the magics print: short, with the numbers a user acts on."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ft_notebook.session import RestoreReport, SnapshotInfo, TransactionOutcome


def size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def saved(info: SnapshotInfo) -> None:
    changed = ", ".join(info.changed) if info.changed else "nothing changed"
    print(
        f"ft: snapshot {info.name!r} after cell {info.cell}: {info.variables} variables "
        f"({size(info.size)}), wrote {size(info.bytes_written)}; changed: {changed}"
    )
    if info.replay:
        print(f"    kept by replaying their cells: {', '.join(info.replay)}")
    _unprotected(info.unprotected)


def _unprotected(why_by_name: dict[str, str]) -> None:
    """One line per variable a snapshot cannot bring back; a live connection (a Dask
    client) is no fault of the snapshot, so it is said as what it is, not as an error."""
    from ft_notebook.session._connections import LIVE_CONNECTION

    for name, why in sorted(why_by_name.items()):
        print(
            f"    {name}: {why}"
            if why.startswith(LIVE_CONNECTION)
            else f"    {name}: NOT protected: {why}"
        )


def restored(report: RestoreReport) -> None:
    back = len(report.restored) + len(report.replayed)
    print(f"ft: restored {back} variables ({len(report.replayed)} by replaying their cells)")
    if report.renamed_from:
        print(
            f"    from its snapshots as {report.renamed_from}, before this notebook was "
            f"renamed; new snapshots go under its new name"
        )
    # one line per variable that did not come back equal: name, type, why
    for name, why in sorted(report.different.items()):
        print(f"    {name} ({_type(report, name)}): NOT restored, its replay differs: {why}")
    for name, why in sorted(report.lost.items()):
        print(f"    {name} ({_type(report, name)}): lost: {why}")


def _type(report: RestoreReport, name: str) -> str:
    return report.types.get(name, "module").removeprefix("builtins.")


def transaction(outcome: TransactionOutcome) -> None:
    if outcome.error is None:
        tries = f" (attempt {outcome.attempts})" if outcome.attempts > 1 else ""
        print(f"ft: cell committed{tries}")
        return
    print(
        f"ft: the cell raised {type(outcome.error).__name__} after {outcome.attempts} "
        f"attempt(s); rolled back: {', '.join(outcome.rolled_back) or 'nothing changed'}"
        + (f"; removed new: {', '.join(outcome.removed)}" if outcome.removed else "")
    )


def listing(rows: Sequence[dict[str, Any]], renamed_from: str | None = None) -> None:
    if not rows:
        print("ft: no snapshots yet: `%ft save` takes one, `%ft auto on` one after every cell")
        return
    if renamed_from:
        print(f"ft: taken before this notebook was renamed (as {renamed_from}); `%ft restore`")
        print("    brings them back")
    # one row per name: the snapshot `%ft restore NAME` brings back (its newest); the
    # older ones of a name are history the store keeps, not a choice to make
    newest = {r["name"]: i for i, r in enumerate(rows)}
    rows = [r for i, r in enumerate(rows) if newest[r["name"]] == i]
    print(f"{'name':<20} {'time':<19} {'cell':>5} {'size':>10}  variables")
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["time"]))
        names = ", ".join(r["variables"])
        print(f"{r['name']:<20} {when:<19} {r['cell']:>5} {size(r['size']):>10}  {names}")


def status(state: dict[str, Any]) -> None:
    last = state["last"]
    if state.get("error") is not None:
        print(f"    the last background snapshot FAILED: {state['error']}")
    print(f"ft: notebook {state['notebook']!r}; auto snapshots {'on' if state['auto'] else 'off'}")
    if last is not None:
        print(
            f"    last snapshot {last.name!r} after cell {last.cell}, {size(last.size)}, "
            f"{len(last.replay)} kept by replay, {len(last.unprotected)} not protected"
        )
        if last.replay:
            print(f"    kept by replaying their cells: {', '.join(last.replay)}")
        _unprotected(last.unprotected)
