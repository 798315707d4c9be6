"""Every code block of README.md, run as a person would type it (issue 38).

The python blocks go, in order, into one real IPython kernel (``%ft`` magics
included), in a folder of their own with a data folder and a home of their own; a
block that fails fails the test with the kernel's traceback. A comment just before a
block can say what else to do with it:

- ``<!-- readme-test: skip (why) -->``: it needs what this machine lacks (a GPU, a
  SLURM queue) or would run for ever; it is still checked as far as it can be: a
  python block compiles as IPython would run it, a bash block parses, and each
  ``make TARGET`` it names is a target of the Makefile;
- ``<!-- readme-test: new kernel (why) -->``: the kernel is SIGKILLed (a crash) and
  the block runs in a fresh one, as the README's "in the new kernel" says;
- ``<!-- readme-test: output (why) -->`` on a block without a language: the text the
  block before it prints, compared line by line.

A block without a language and without that comment fails the test: every block is
run, compared or marked. The serving example loads ``model.pt`` from the notebook's
folder: the test puts one there first, as a user would have it.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from ft_notebook.testing import KernelSession

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_MARK = re.compile(r"<!-- readme-test: (skip|new kernel|output) \((.+)\) -->")


@dataclass(frozen=True)
class Block:
    line: int  # of its opening fence, 1-based
    lang: str
    code: str
    mark: str | None  # skip, new kernel, output
    why: str = ""

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.lang or 'no language'})"


def readme_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.fullmatch(r"```(\w*)", lines[i].strip())
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = _MARK.fullmatch(before.strip())
        blocks.append(
            Block(
                line=i + 1,
                lang=fence[1],
                code="\n".join(lines[i + 1 : end]),
                mark=mark[1] if mark else None,
                why=mark[2] if mark else "",
            )
        )
        i = end + 1
    return blocks


def test_the_readme_blocks_are_each_run_compared_or_marked() -> None:
    blocks = readme_blocks(README.read_text())
    unknown = [str(b) for b in blocks if b.lang not in ("python", "bash", "")]
    bare = [str(b) for b in blocks if not b.lang and b.mark != "output"]
    assert not unknown, f"blocks in a language the test does not run: {unknown}"
    assert not bare, f"blocks without a language and not marked as output: {bare}"
    skipped = [b for b in blocks if b.mark == "skip"]
    assert all(b.why for b in skipped)
    assert sum(b.lang == "python" and b.mark != "skip" for b in blocks) >= 10


def test_the_skipped_blocks_are_checked_as_far_as_they_can_be() -> None:
    from IPython.core.inputtransformer2 import TransformerManager

    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))
    for block in readme_blocks(README.read_text()):
        if block.mark != "skip":
            continue
        if block.lang == "python":
            compile(TransformerManager().transform_cell(block.code), str(block), "exec")
        else:
            parsed = subprocess.run(["bash", "-n"], input=block.code, text=True, check=False)
            assert parsed.returncode == 0, block
            named = re.findall(r"^make (\S+)", block.code, flags=re.M)
            pips = re.findall(r"^pip install (.+)$", block.code, flags=re.M)
            assert named or pips, block
            assert set(named) <= targets, (block, named, sorted(targets))
            # the CPU-build install, which test_wheel.py does from the local wheelhouse
            # (the index is not reachable here): torch's CPU index, then the wheel
            # `make dist` builds
            for args in pips:
                cpu_torch = args == "torch --index-url https://download.pytorch.org/whl/cpu"
                assert cpu_torch or args == "dist/ft_notebook-*.whl", (block, args)


def _model_file(folder: Path) -> None:
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    torch.save(model.state_dict(), folder / "model.pt")


@pytest.mark.slow
@pytest.mark.timeout(900)  # two clusters, two runs and a service on two cores: 1.5-2 min here
def test_every_python_block_runs_as_written_in_a_real_kernel(tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    _model_file(work)
    env = dict(
        os.environ,
        HOME=str(home),
        DASK_FT_NOTEBOOK__DATA_DIR=str(tmp_path / "data"),
        JPY_SESSION_NAME=str(work / "README.ipynb"),
    )
    kernel = KernelSession(tmp_path / "kernel.log", cwd=work, env=env).start()
    printed = ""
    ran = []
    try:
        for block in readme_blocks(README.read_text()):
            if block.mark == "skip" or block.lang == "bash":
                continue
            if block.mark == "output":
                assert _lines(printed) == _lines(block.code), f"{block} is not what was printed"
                continue
            if block.mark == "new kernel":
                kernel.kill()
                kernel.start()
            result = kernel.execute(block.code, timeout=300)
            assert result.status == "ok", (
                f"{block} failed: {result.error_name}: {result.error_value}\n"
                f"{result.traceback[-4000:]}\n{result.stdout[-2000:]}\n"
                f"{_cluster_warnings(tmp_path / 'data')}"
            )
            printed = result.stdout
            ran.append(block.line)
            if block.mark == "new kernel":
                back = kernel.execute("print(type(net).__name__, type(opt).__name__)")
                assert back.check().stdout.split() == ["MyNet", "AdamW"], back.stdout
        assert len(ran) >= 10, ran
    finally:
        _stop_clusters(kernel)


def _cluster_warnings(data: Path) -> str:
    """The warnings and errors of the clusters' logs, for a failure's message."""
    out = []
    for log in sorted(data.glob("clusters/*/cluster.log")):
        lines = [
            ln
            for ln in log.read_text().splitlines()
            if " - WARNING - " in ln or " - ERROR - " in ln
        ]
        out += [f"--- {log.parent.name}", *lines[-40:]]
    return "\n".join(out)


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip().splitlines()]


def _stop_clusters(kernel: KernelSession) -> None:
    """Stop what the README started, from a kernel of the same data folder."""
    stop = "import ft_notebook as ft\nprint([ft.down(c.name) for c in ft.clusters()])"
    try:
        kernel.execute(stop, timeout=120)
    except Exception:  # the kernel died: a fresh one stops them
        kernel.kill()
        kernel.start()
        kernel.execute(stop, timeout=120)
    finally:
        kernel.shutdown()
