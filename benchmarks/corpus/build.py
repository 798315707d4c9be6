"""Lay out the corpus's notebooks from their sources, as MANIFEST.json names them.

The notebooks are statsmodels' own examples (``examples/notebooks``, BSD-3-Clause, its
notice in ``LICENSE-statsmodels.txt``). Each manifest entry gives the repository, the
path, the commit and the git blob id of the file; ``build.py`` reads it from a git
directory of that repository (``--git-dir``, e.g. a clone), checks the blob id, applies
the entry's edits (each an exact text replacement in one code cell, with why) and
writes ``benchmarks/corpus/notebooks/<id>.ipynb`` (not kept in git).

    .venv/bin/python benchmarks/corpus/build.py --git-dir PATH/TO/statsmodels/.git
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "MANIFEST.json"
NOTEBOOKS = HERE / "notebooks"


def entries() -> list[dict[str, object]]:
    return list(json.loads(MANIFEST.read_text())["notebooks"])


def code_cells(nb_id: str) -> list[str]:
    """The code cells of a laid-out notebook, in order, empty ones left out."""
    path = NOTEBOOKS / f"{nb_id}.ipynb"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: lay out the corpus first (benchmarks/corpus/build.py)"
        )
    nb = json.loads(path.read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    return [c for c in cells if c.strip()]


def build(git_dir: Path) -> None:
    NOTEBOOKS.mkdir(exist_ok=True)
    for entry in entries():
        spec = f"{entry['commit']}:{entry['path']}"
        blob = _git(git_dir, "rev-parse", spec).strip()
        if blob != entry["blob"]:
            raise SystemExit(
                f"{entry['id']}: {spec} is blob {blob}, the manifest says {entry['blob']}"
            )
        nb = json.loads(_git(git_dir, "show", spec))
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        for edit in entry.get("edits", []):  # type: ignore[attr-defined]
            cell = code[edit["cell"]]
            text = "".join(cell["source"])
            if edit["find"] not in text:
                raise SystemExit(f"{entry['id']}: code cell {edit['cell']} has no {edit['find']!r}")
            cell["source"] = text.replace(edit["find"], edit["replace"])
        for cell in code:
            cell["outputs"], cell["execution_count"] = [], None
        (NOTEBOOKS / f"{entry['id']}.ipynb").write_text(json.dumps(nb, indent=1) + "\n")
        print(f"{entry['id']}: {entry['path']} at {str(entry['commit'])[:10]}")


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True, check=True
    ).stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--git-dir", type=Path, required=True)
    build(parser.parse_args().git_dir)


if __name__ == "__main__":
    main()
