"""``make test`` from a fresh clone, as a new machine runs it (issue 38's goal: 10 min).

Each run clones this repository's committed HEAD into a new temporary folder and runs
``make test`` there, timing every line it prints: the set-up (venv, torch, the package,
the extension's build, the managers' venv) ends where pytest starts. pip's and uv's
caches of this machine are used, as they would be on a machine that installed before.
Nothing else should run meanwhile: the suite keeps both cores busy.

    .venv/bin/python benchmarks/bench_suite.py [--runs 2]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import Goal, Table, save

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"=+ (.*) in [\d.]+s")


def fresh_make_test(log: Path) -> dict[str, object]:
    """One clone and ``make test``: seconds of set-up and in all, pytest's summary line
    and the tests that failed; what it printed goes to ``log``, timestamped."""
    with tempfile.TemporaryDirectory(prefix="ft-fresh-") as folder:
        clone = Path(folder) / "repo"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        start = time.monotonic()
        pytest_at, summary, failed = None, "", []
        proc = subprocess.Popen(
            ["make", "test"],
            cwd=clone,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            with log.open("a") as out:
                out.write(f"{time.monotonic() - start:7.1f} {line}")
            if line.startswith(("FAILED ", "ERROR ")):
                failed.append(line.split(" - ")[0].removeprefix("FAILED ").strip())
            if pytest_at is None and " -m pytest " in line:
                pytest_at = time.monotonic() - start
            if match := SUMMARY.search(line):
                summary = match.group(1)
        code = proc.wait()
        total = time.monotonic() - start
    return {
        "total_s": total,
        "setup_s": pytest_at if pytest_at is not None else total,
        "summary": summary or f"no pytest summary (make exited {code})",
        "failed": failed,
        "ok": code == 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    runs = []
    logs = Path(tempfile.mkdtemp(prefix="ft-bench-suite-"))
    for i in range(args.runs):
        runs.append(fresh_make_test(logs / f"make-test-{i + 1}.log"))
        print(f"run {i + 1} (log in {logs}): {runs[-1]}", file=sys.stderr, flush=True)
    table = Table(
        "fresh",
        "make test from a fresh clone",
        "`git clone` of HEAD into a new folder, then `make test` there (set-up from this "
        "machine's pip and uv caches, then the suite: pytest-xdist, 4 workers, "
        "tests/_schedule.py's order); 2 cores, nothing else running.",
    )
    table.row(
        "make test, set-up and suite",
        "s",
        [float(r["total_s"]) for r in runs],  # type: ignore[arg-type]
        goal=Goal("value", "<=", 600.0),  # the median of the runs: the machine is shared
        detail="set-up "
        + ", ".join(f"{r['setup_s']:.0f} s" for r in runs)
        + "; pytest: "
        + "; ".join(str(r["summary"]) for r in runs)
        + "".join(f"; failed: {', '.join(r['failed'])}" for r in runs if r["failed"]),  # type: ignore[arg-type]
    )
    table.row(
        "make test green",
        "bool",
        [1.0 if r["ok"] else 0.0 for r in runs],
        goal=Goal("value", "==", 1.0, stat="all"),
    )
    save("suite", "make test from a fresh clone", [table])


if __name__ == "__main__":
    main()
