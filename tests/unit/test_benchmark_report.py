"""BENCHMARKS.md is what the saved results render, and the renderer judges rows right.

The report is generated (``benchmarks/render.py``) from the raw samples every benchmark
saves (``benchmarks/_report.py``); a hand edit, a results file changed without
re-rendering, or a benchmark that stopped saving its results fails here.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import _report  # noqa: E402
import render  # noqa: E402


def test_benchmarks_md_is_what_the_results_render() -> None:
    expected = render.render()
    actual = (ROOT / "BENCHMARKS.md").read_text()
    assert actual == expected, "BENCHMARKS.md is stale: run .venv/bin/python benchmarks/render.py"


def test_every_benchmark_saves_results() -> None:
    scripts = {p.stem.removeprefix("bench_") for p in BENCHMARKS.glob("bench_*.py")}
    saved = {p.stem for p in (BENCHMARKS / "results").glob("*.json")}
    missing = sorted(name for name in scripts if name not in saved)
    assert not missing, f"no results/<name>.json for {missing}: run benchmarks/run.py {missing}"
    for name in scripts:
        assert f'save("{name}"' in (BENCHMARKS / f"bench_{name}.py").read_text(), name


def test_every_saved_row_is_judged_against_a_reference_or_a_goal() -> None:
    for path in (BENCHMARKS / "results").glob("*.json"):
        doc = json.loads(path.read_text())
        for table in doc["tables"]:
            assert {"command", "date", "commit", "machine"} <= set(table["run"]), path.name
            for row in table["rows"]:
                assert row["ours"], (path.name, row["measure"])
                assert row["reference"] is not None or row["goal"] is not None, (
                    path.name,
                    row["measure"],
                )


def _rendered_row(tmp_path: Path, **row: object) -> str:
    table = _report.Table("t", "A table", "How it was measured.")
    table.row("the measure", **row)  # type: ignore[arg-type]
    results = tmp_path / "results"
    results.mkdir()
    doc = {
        "benchmark": "demo",
        "title": "Demo",
        "tables": [{**dataclasses.asdict(table), "run": _report.run_info(["bench_demo.py"])}],
    }
    (results / "demo.json").write_text(json.dumps(doc))
    text = render.render(results, tmp_path / "notes")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("| the measure")]
    return line


def test_a_ratio_goal_is_judged_on_the_ratio_of_medians(tmp_path: Path) -> None:
    line = _rendered_row(
        tmp_path,
        unit="s",
        ours=[0.3, 0.1, 0.2],  # median 0.2
        reference=[0.1, 0.4, 0.15],  # median 0.15
        reference_name="the other tool",
        goal=_report.Goal("ratio", "<=", 1.3),
    )
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == "200 ms (100 ms–300 ms, n=3)"
    assert cells[2] == "150 ms (100 ms–400 ms, n=3) (the other tool)"
    assert cells[3] == "1.33"  # 0.2 / 0.15, not the mean or the paired ratios
    assert cells[4:6] == ["ratio <= 1.3", "**no**"]


def test_paired_ratios_and_a_goal_met(tmp_path: Path) -> None:
    line = _rendered_row(
        tmp_path,
        unit="samples/s",
        ours=[100.0, 300.0, 200.0],
        reference=[100.0, 100.0, 400.0],
        reference_name="torchrun",
        ratio="pairs",  # 1, 3, 0.5 -> median 1
        goal=_report.Goal("ratio", ">=", 0.97),
    )
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3] == "1"
    assert cells[5] == "yes"


def test_a_reference_of_zero_gives_no_ratio_and_no_goal_met(tmp_path: Path) -> None:
    line = _rendered_row(
        tmp_path,
        unit="count",
        ours=[3.0],
        reference=[0.0],
        reference_name="the other tool",
        goal=_report.Goal("ratio", "<=", 1),
    )
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3] == "n/a"
    assert cells[5] == "**no** (reference 0)"


def test_a_value_goal_on_every_run(tmp_path: Path) -> None:
    line = _rendered_row(
        tmp_path, unit="bool", ours=[1, 1, 0, 1], goal=_report.Goal("value", "==", 1, stat="all")
    )
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:3] == ["3/4", "none"]
    assert cells[4:6] == ["every run", "**no**"]


def test_a_row_without_reference_or_goal_is_refused() -> None:
    with pytest.raises(ValueError, match="reference measured in the same run or a goal"):
        _report.Row("lonely number", "s", [0.1])
    with pytest.raises(ValueError, match="ratio goal needs a reference"):
        _report.Row("ratio of nothing", "s", [0.1], goal=_report.Goal("ratio", "<=", 1))
    with pytest.raises(ValueError, match="as many samples"):
        _report.Row("unpaired", "s", [0.1, 0.2], reference=[0.1], reference_name="r", ratio="pairs")


def test_a_failed_measurement_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_report, "RESULTS", tmp_path)
    table = _report.Table("t", "T", "setup")
    table.row("nan", "s", [float("nan")], goal=_report.Goal("value", "<=", 1))
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        _report.save("demo", "Demo", [table], argv=["bench_demo.py"])
    assert not (tmp_path / "demo.json").exists()


def test_a_partial_run_keeps_the_other_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_report, "RESULTS", tmp_path)

    def table(id: str, value: float) -> _report.Table:
        t = _report.Table(id, id, "setup")
        t.row("m", "s", [value], goal=_report.Goal("value", "<=", 1))
        return t

    _report.save("demo", "Demo", [table("a", 0.1), table("b", 0.2)], argv=["x.py"])
    _report.save("demo", "Demo", [table("a", 0.3)], argv=["x.py", "--only", "a"])
    doc = json.loads((tmp_path / "demo.json").read_text())
    # the refreshed table keeps its place, stamped with its own run
    assert [(t["id"], t["rows"][0]["ours"]) for t in doc["tables"]] == [("a", [0.3]), ("b", [0.2])]
    assert doc["tables"][0]["run"]["command"].endswith("x.py --only a")
    assert doc["tables"][1]["run"]["command"].endswith("x.py")


def test_the_overview_names_every_missed_goal(tmp_path: Path) -> None:
    _rendered_row(
        tmp_path, unit="s", ours=[0.5, 0.7], goal=_report.Goal("value", "<=", 0.25, stat="median")
    )
    text = render.render(tmp_path / "results", tmp_path / "notes")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("| [Demo](#demo-demo)")]
    assert line.endswith("| 1 | 0 | 1: the measure (t) |")
