"""make test's file order (``tests/_schedule.py``), driven as xdist's controller drives
it: four workers collect, the scheduler sends files, workers report tests done."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from _schedule import COSTS, MAX_BUSY_AT_ONCE, LongestFirst, cost


class FakeWorker:
    """What the scheduler calls on an xdist worker: the tests it is sent, in order."""

    def __init__(self, name: str) -> None:
        self.name, self.sent, self.shutting_down = name, list[int](), False
        self.gateway = SimpleNamespace(id=name)

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _busy(n: int) -> list[str]:
    """The ``n`` longest busy files."""
    return sorted((f for f, c in COSTS.items() if c.busy), key=lambda f: -COSTS[f].seconds)[:n]


def _waiting(n: int) -> list[str]:
    """The ``n`` longest files that mostly wait."""
    return sorted((f for f, c in COSTS.items() if not c.busy), key=lambda f: -COSTS[f].seconds)[:n]


def _collection() -> list[str]:
    # short unit files with many tests (xdist's own order would send these first),
    # then the long files with few
    short = [f"tests/unit/test_short_{i}.py::test_{j}" for i in range(6) for j in range(9)]
    long = [f"tests/{f}::test_{j}" for f in _busy(5) + _waiting(4) for j in range(3)]
    return short + long


def _scheduler(workers: list[FakeWorker]) -> LongestFirst:
    config: Any = SimpleNamespace(
        getvalue=lambda name: {"tx": [f"{len(workers)}*popen"]}[name],
        option=SimpleNamespace(loadscopereorder=True),
    )
    scheduler = LongestFirst(config)
    for w in workers:
        scheduler.add_node(w)
        scheduler.add_node_collection(w, _collection())
    scheduler.schedule()
    return scheduler


def _file_of(worker: FakeWorker, index: int) -> str:
    return _collection()[worker.sent[index]].split("::")[0]


def test_the_longest_files_start_first_and_two_busy_ones_at_most() -> None:
    workers = [FakeWorker(f"gw{i}") for i in range(4)]
    _scheduler(workers)
    first = [_file_of(w, 0) for w in workers]
    assert sum(cost(f).busy for f in first) == MAX_BUSY_AT_ONCE, first
    # the two longest busy files, and the two longest of those that wait
    assert set(first) == {f"tests/{f}" for f in _busy(2) + _waiting(2)}, first


def test_a_whole_run_sends_each_test_once_and_keeps_two_busy_files_at_most() -> None:
    """A simulated run: each worker runs what it was sent, a long file's tests taking a
    third of its cost each; every test runs once, no worker is left waiting, and a busy
    file starts beside two others only when nothing else waited."""
    workers = [FakeWorker(f"gw{i}") for i in range(4)]
    scheduler = _scheduler(workers)
    collection = _collection()
    ran: list[str] = []
    now, next_test = 0.0, dict.fromkeys(workers, 0)
    ends: dict[FakeWorker, float] = {}

    def start(w: FakeWorker) -> None:
        if next_test[w] < len(w.sent):
            nodeid = collection[w.sent[next_test[w]]]
            file = nodeid.split("::")[0]
            long = cost(file).seconds > 1
            if long and nodeid.endswith("::test_0") and cost(file).busy:
                running = {collection[v.sent[next_test[v]]].split("::")[0] for v in ends}
                if sum(cost(f).busy for f in running) >= MAX_BUSY_AT_ONCE:
                    assert all(cost(f).busy for f in scheduler.workqueue), scheduler.workqueue
            ends[w] = now + (cost(file).seconds / 3 if long else 0.1)

    for w in workers:
        start(w)
    while ends:
        w = min(ends, key=ends.__getitem__)
        now = ends.pop(w)
        index = w.sent[next_test[w]]
        ran.append(collection[index])
        next_test[w] += 1
        scheduler.mark_test_complete(w, index)
        start(w)
        for v in workers:  # a file sent to a worker that had run out starts now
            if v not in ends:
                start(v)
    assert sorted(ran) == sorted(collection)
    assert all(w.shutting_down for w in workers)
