"""What a benchmark measured, as data: the rows ``render.py`` turns into BENCHMARKS.md.

A benchmark fills a :class:`Table` per question it answers and saves it with
:func:`save`, which writes ``benchmarks/results/<benchmark>.json``: the machine, the
date, the commit, the command and every raw sample, per table. Tables are replaced by
id and the others kept, so ``bench_train.py --only rto`` refreshes only its own
tables (each says which run it came from).

A row is our samples against a named reference's samples measured in the same run
(the ratio of their medians, or the median of paired ratios), or, where no reference
exists, our samples against a goal. A row with neither is refused: it would be a
number nobody can judge.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

Stat = Literal["median", "max", "min", "mean", "sum", "all"]
Op = Literal["<=", ">=", "<", ">", "=="]
STATS: tuple[str, ...] = ("median", "max", "min", "mean", "sum", "all")
OPS: tuple[str, ...] = ("<=", ">=", "<", ">", "==")


@dataclass(frozen=True)
class Goal:
    """``of``'s ``stat`` must satisfy ``op limit``: ``Goal("ratio", ">=", 0.97)``, or
    ``Goal("value", "<=", 0.25, stat="median")`` for a value without a reference;
    ``stat="all"`` asks it of every sample."""

    of: Literal["ratio", "value"]
    op: Op
    limit: float
    stat: Stat = "median"

    def __post_init__(self) -> None:
        if self.of not in ("ratio", "value") or self.op not in OPS or self.stat not in STATS:
            raise ValueError(f"Goal({self.of!r}, {self.op!r}, {self.limit}, stat={self.stat!r})")


@dataclass
class Row:
    measure: str
    unit: str  # "s", "samples/s", "MB/s", "bool" (1/0 per run), "count", "x" or ""
    ours: list[float]
    reference: list[float] | None = None
    reference_name: str = ""
    ratio: Literal["medians", "pairs"] = "medians"
    goal: Goal | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        if not self.ours:
            raise ValueError(f"{self.measure}: no samples of ours")
        if self.reference is None and self.goal is None:
            raise ValueError(
                f"{self.measure}: a row needs a reference measured in the same run or a "
                "goal; name one"
            )
        if self.reference is not None and not self.reference_name:
            raise ValueError(f"{self.measure}: name the reference")
        if self.goal is not None and self.goal.of == "ratio" and self.reference is None:
            raise ValueError(f"{self.measure}: a ratio goal needs a reference")
        if self.ratio == "pairs" and len(self.ours) != len(self.reference or []):
            raise ValueError(f"{self.measure}: paired ratios need as many samples on each side")
        self.ours = [float(v) for v in self.ours]
        if self.reference is not None:
            self.reference = [float(v) for v in self.reference]


@dataclass
class Table:
    """One question a benchmark answers: ``setup`` says how it was measured."""

    id: str
    title: str
    setup: str
    rows: list[Row] = field(default_factory=list)

    def row(self, measure: str, unit: str, ours: list[float], **kw: object) -> Row:
        made = Row(measure, unit, list(ours), **kw)  # type: ignore[arg-type]
        self.rows.append(made)
        return made


def run_info(argv: list[str] | None = None) -> dict[str, object]:
    """Where and when, and the command as typed in the repository root."""
    argv = sys.argv if argv is None else argv
    root = HERE.parent
    script = Path(argv[0]).resolve()
    shown = script.relative_to(root) if script.is_relative_to(root) else script
    return {
        "command": " ".join([".venv/bin/python", str(shown), *argv[1:]]),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(root),
        "machine": machine(),
    }


def machine() -> dict[str, object]:
    info: dict[str, object] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
    }
    for module in ("torch", "dask", "distributed"):
        mod = sys.modules.get(module)
        if mod is not None:
            info[module] = getattr(mod, "__version__", "?")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _commit(root: Path) -> str:
    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        except FileNotFoundError:  # a lent GPU machine may have no git: still save
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    # results and the report change with every run; code changes make a run "dirty"
    dirty = git("status", "--porcelain", "--", ".", ":!benchmarks/results", ":!BENCHMARKS.md")
    return head + ("-dirty" if dirty else "")


def save(benchmark: str, title: str, tables: list[Table], *, argv: list[str] | None = None) -> Path:
    """Write (or update) ``results/<benchmark>.json`` with these tables, each stamped
    with this run; tables of other runs with other ids are kept."""
    if not benchmark.replace("-", "").isalnum():
        raise ValueError(f"benchmark name {benchmark!r}: letters, digits and '-' only")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{benchmark}.json"
    kept = json.loads(path.read_text())["tables"] if path.exists() else []
    stamp = run_info(argv)
    fresh = [{**asdict(t), "run": stamp} for t in tables]
    # a refreshed table keeps its place; new ones follow
    by_id = {t["id"]: t for t in fresh}
    merged = [by_id.pop(t["id"], t) for t in kept] + list(by_id.values())
    doc = {"benchmark": benchmark, "title": title, "tables": merged}
    # a NaN is a failed measurement: refuse it rather than write what JSON cannot read
    text = json.dumps(doc, indent=1, allow_nan=False)
    path.write_text(text + "\n")
    shown = path.relative_to(HERE.parent) if path.is_relative_to(HERE.parent) else path
    print(f"results: {shown}", file=sys.stderr)
    return path
