"""Benchmark of the checkpoint store against its anchors, side by side in one run.

    .venv/bin/python benchmarks/bench_store.py [--mb 500] [--reps 5]

Saves ``results/store.json`` (``_report.py``): every repetition's sample of both arms
of a row, the two arms alternating so that drift of the machine hits both:

1. durable save throughput of a state against a plain sequential write of the same
   bytes with fsync (goal: at least 0.8 of it);
2. the stall of ``save_async`` against a synchronous ``torch.save`` of the same state
   (goal: at most 0.1 of it), and against the step time of a small training loop that
   saves every 50 steps (goal: under 1%);
3. ``load`` with verification against ``torch.load(weights_only=True)`` of the same
   state (goal: at most 1.3x). Both read files the page cache holds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from _report import Goal, Table, save

from ft_notebook.store import CheckpointStore


def make_state(mb: int) -> dict[str, Any]:
    """A model-and-optimizer-like state of about ``mb`` MB: 16 MB weights, small biases,
    Adam moments, a step counter and RNG state. Random, so nothing deduplicates."""
    g = torch.Generator().manual_seed(0)
    n_layers = max(1, mb // (16 * 3))  # weight + two moments of 16 MB per layer
    model, moments = {}, {}
    for i in range(n_layers):
        model[f"layer{i}.weight"] = torch.randn(2048, 2048, generator=g)
        model[f"layer{i}.bias"] = torch.randn(2048, generator=g)
        moments[i] = {
            "step": torch.tensor(100.0),
            "exp_avg": torch.randn(2048, 2048, generator=g),
            "exp_avg_sq": torch.rand(2048, 2048, generator=g),
        }
    return {
        "model": model,
        "optim": {"state": moments, "param_groups": [{"lr": 1e-3}]},
        "rng": torch.get_rng_state(),
    }


def state_bytes(state: dict[str, Any]) -> list[memoryview]:
    out: list[memoryview] = []

    def walk(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            out.append(v.reshape(-1).view(torch.uint8).numpy().data)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    walk(state)
    return out


def plain_write(path: Path, parts: list[memoryview]) -> None:
    """What any program would do: one file, large sequential writes, one fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for part in parts:
            view = part
            while view:
                view = view[os.write(fd, view[: 64 << 20]) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def timed(fn: Callable[[], object]) -> float:
    """Seconds ``fn`` takes, started with no dirty pages left by the arm before it
    (their writeback would otherwise slow whichever arm runs next)."""
    os.sync()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_save(work: Path, state: dict[str, Any], reps: int) -> Table:
    parts = state_bytes(state)
    nbytes = sum(p.nbytes for p in parts)
    plain, ours = [], []
    target = work / "plain.bin"
    for rep in range(reps):
        plain.append(timed(partial(plain_write, target, parts)))
        target.unlink()
        root = work / f"store-save-{rep}"  # a fresh store: every byte is new
        store = CheckpointStore(root, publish_events=False)
        ours.append(timed(partial(store.save, "b", 1, state)))
        shutil.rmtree(root)
    mb = nbytes / 1e6
    table = Table(
        "save",
        "Durable save",
        f"`CheckpointStore.save` of a {mb:.0f} MB model-and-optimizer state (random, so "
        "nothing deduplicates) into a fresh store, against one sequential write of the same "
        f"bytes with one fsync; {reps} repetitions, the arms alternating, `os.sync()` "
        "before each.",
    )
    table.row(
        f"durable save of {mb:.0f} MB (throughput)",
        "MB/s",
        [mb / t for t in ours],
        reference=[mb / t for t in plain],
        reference_name="write+fsync",
        ratio="pairs",
        goal=Goal("ratio", ">=", 0.8),
    )
    return table


def bench_stall(work: Path, state: dict[str, Any], reps: int) -> Table:
    saves, stalls = [], []
    root = work / "store-async"
    store = CheckpointStore(root, keep=1, publish_events=False)
    for rep in range(reps):
        saves.append(timed(lambda: torch.save(state, work / "sync.pt")))
        os.sync()
        handle = store.save_async("bench", rep, state)
        stalls.append(handle.stall_s)
        handle.result(timeout=600)
    store.close()
    shutil.rmtree(root)
    (work / "sync.pt").unlink()
    mb = sum(p.nbytes for p in state_bytes(state)) / 1e6
    table = Table(
        "stall",
        "The stall of save_async",
        f"How long `save_async` of a {mb:.0f} MB state holds the caller (the copy into "
        "staging buffers), against a synchronous `torch.save` of the same state; "
        f"{reps} repetitions alternating with it on one store; then the first save of a "
        f"fresh store, {reps} times with and {reps} without `store.warm(state)` first, "
        "alternating.",
    )
    table.row(
        "save_async stall, same state",
        "s",
        stalls,
        reference=saves,
        reference_name="torch.save",
        ratio="pairs",
        goal=Goal("ratio", "<=", 0.1),
    )
    cold, warmed = bench_first_stall(work, state, reps)
    table.row(
        "save_async stall of the first save (buffers not yet allocated)",
        "s",
        cold,
        reference=saves,
        reference_name="torch.save",
    )
    table.row(
        "the same after `store.warm(state)` (buffers made in the background)",
        "s",
        warmed,
        reference=saves,
        reference_name="torch.save",
    )
    return table


def bench_first_stall(
    work: Path, state: dict[str, Any], reps: int
) -> tuple[list[float], list[float]]:
    """The first save_async of a fresh store, with and without ``warm(state)`` first
    (the buffers made and faulted in on a background thread), alternating."""
    cold, warmed = [], []
    for rep in range(reps):
        for warm in (rep % 2 == 0, rep % 2 == 1):
            root = work / f"store-first-{rep}-{warm}"
            store = CheckpointStore(root, keep=1, publish_events=False)
            if warm:
                store.warm(state).join()
            handle = store.save_async("bench", 1, state)
            (warmed if warm else cold).append(handle.stall_s)
            handle.result(timeout=600)
            store.close()
            shutil.rmtree(root)
    return cold, warmed


def bench_loop(work: Path, reps: int, steps: int = 200, every: int = 50) -> Table:
    """A small training loop: the same loop without saves and with save_async every
    ``every`` steps, alternating, each from the same initial model."""
    store = CheckpointStore(work / "store-loop", keep=2, publish_events=False)
    x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))

    runs = iter(range(1_000_000))

    def loop(save: bool) -> tuple[float, list[float], float]:
        run = f"loop{next(runs)}"
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(512, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 10),
        )
        opt = torch.optim.Adam(model.parameters())
        stalls: list[float] = []
        start = time.perf_counter()
        for step in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if save and step % every == every - 1:
                state = {"model": model.state_dict(), "optim": opt.state_dict()}
                stalls.append(store.save_async(run, step, state).stall_s)
        elapsed = time.perf_counter() - start
        store.flush()
        nbytes = sum(p.numel() * p.element_size() for p in model.parameters()) * 3
        return elapsed, stalls, nbytes / 1e6

    loop(False)  # warm up
    plain, saving, stalls = [], [], []
    for _ in range(reps):
        os.sync()
        plain.append(loop(False)[0])
        t, s, state_mb = loop(True)
        saving.append(t)
        stalls += s
    store.close()
    table = Table(
        "loop",
        "save_async in a training loop",
        f"A small MLP (Adam, {state_mb:.0f} MB state with the moments) trained for "
        f"{steps} steps on the CPU, once without saves and once with `save_async` every "
        f"{every} steps, alternating, {reps} rounds after a warm-up run.",
    )
    table.row(
        f"save_async stall, one save every {every} steps",
        "s",
        stalls,
        reference=[t / steps * every for t in saving],
        reference_name=f"time of {every} steps",
        goal=Goal("ratio", "<", 0.01),
    )
    table.row(
        f"training loop, {steps} steps, save_async every {every}",
        "s",
        saving,
        reference=plain,
        reference_name="no saves",
        ratio="pairs",
    )
    return table


def bench_load(work: Path, state: dict[str, Any], reps: int) -> Table:
    store = CheckpointStore(work / "store-load", publish_events=False)
    store.save("bench", 1, state)
    torch.save(state, work / "load.pt")
    ours, anchor = [], []
    for _ in range(reps):
        anchor.append(timed(lambda: torch.load(work / "load.pt", weights_only=True)))
        ours.append(timed(lambda: store.load("bench")))
    mb = sum(p.nbytes for p in state_bytes(state)) / 1e6
    table = Table(
        "load",
        "Load",
        f"`CheckpointStore.load` of a {mb:.0f} MB state, every chunk verified, against "
        f"`torch.load(weights_only=True)` of the same state; both files in the page "
        f"cache, {reps} repetitions, alternating.",
    )
    table.row(
        "load with verification",
        "s",
        ours,
        reference=anchor,
        reference_name="torch.load(weights_only=True)",
        ratio="pairs",
        goal=Goal("ratio", "<=", 1.3),
    )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=500, help="size of the state (default 500)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per arm (default 5)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-store-", dir=args.dir))
    try:
        state = make_state(args.mb)
        disk = shutil.disk_usage(work).total / 1e9
        print(f"{work} on {disk:.0f} GB disk, {args.reps} repetitions", file=sys.stderr)
        tables = []
        for name, bench in (
            ("save", lambda: bench_save(work, state, args.reps)),
            ("stall", lambda: bench_stall(work, state, args.reps)),
            ("loop", lambda: bench_loop(work, args.reps)),
            ("load", lambda: bench_load(work, state, args.reps)),
        ):
            print(f"{name} ...", file=sys.stderr, flush=True)
            tables.append(bench())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save("store", "Checkpoint store", tables)


if __name__ == "__main__":
    main()
