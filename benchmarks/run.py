"""Run every benchmark, then render BENCHMARKS.md from their results (``make bench``).

``python benchmarks/run.py`` runs them all; ``python benchmarks/run.py events store``
runs those whose file is ``bench_<name>.py``. Each writes ``results/<name>.json``
(``_report.py``); the report is rendered from every results file, so the areas not
run this time keep their last figures, each table stamped with its own run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main(names: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if names:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in names]
    failed = []
    for script in scripts:
        print(
            f"\n== {script.stem}  (`{sys.executable} {script.relative_to(HERE.parent)}`)",
            flush=True,
        )
        if subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode != 0:
            failed.append(script.name)
    import render

    render.main([])
    if failed:
        print(f"\nFAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
