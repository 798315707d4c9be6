"""The order ``make test`` runs its files in under pytest-xdist: the longest first, never
more than two that keep the cores busy at once.

The suite is CPU-bound on two cores, but its longest files mostly wait: the demos are
played at a person's pace (15 s pauses, samples read at 3 ms each). xdist's own order
(``--dist loadfile``) sends the files with the most tests first, so the demos, with one
test each, ran last and together, one core idle for the last minute and more. Sent
first all at once instead, the training drills, the own-cluster runs and the browsers
overloaded the cores and tests failed from it (a survivor taken for hung and evicted,
a breaker opened on a late health check). So: longest first, at most
:data:`MAX_BUSY_AT_ONCE` busy files running, the waiting ones beside them.
"""

from __future__ import annotations

from typing import NamedTuple

from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController


class Cost(NamedTuple):
    seconds: float  # the file's tests and fixtures, as a warm make test measured them
    busy: bool  # trains on a cluster, drives a browser or builds a wheel: CPU all along


#: Measured with ``pytest -n 4 --dist loadfile --durations=0`` (summed by file); a file
#: not named here is taken to be short (unit tests).
COSTS = {
    "browser/test_labextension_browser.py": Cost(134, busy=True),
    "chaos/test_train_drills.py": Cost(117, busy=True),
    "chaos/test_train_drills_cases.py": Cost(114, busy=True),
    "integration/test_demo_04.py": Cost(96, busy=False),
    "integration/test_demo_02_restart.py": Cost(88, busy=False),
    "integration/test_own_cluster.py": Cost(88, busy=True),
    "integration/test_train_runs.py": Cost(88, busy=True),
    "integration/test_demo_02.py": Cost(81, busy=False),
    "chaos/test_train_chaos.py": Cost(77, busy=True),
    "integration/test_demo_03.py": Cost(73, busy=False),
    "integration/test_snapshot_zoo.py": Cost(57, busy=True),
    "browser/test_dashboard_browser.py": Cost(48, busy=True),
    "integration/test_demo_01.py": Cost(43, busy=False),
    "integration/test_dashboard_notebook.py": Cost(36, busy=False),
    "security/test_listeners.py": Cost(36, busy=False),
    "integration/test_wheel.py": Cost(31, busy=True),
    "integration/test_magics_kernel.py": Cost(31, busy=False),
    "integration/test_friction.py": Cost(30, busy=False),
    "integration/test_demos.py": Cost(27, busy=False),
    "integration/test_cluster_recovery.py": Cost(26, busy=True),
    "integration/test_restore_continuation.py": Cost(24, busy=False),
    "integration/test_serve.py": Cost(24, busy=False),
    "integration/test_readme.py": Cost(23, busy=False),
    "browser/test_lab_dashboards_browser.py": Cost(22, busy=True),
    "browser/test_lab_cluster_controls_browser.py": Cost(21, busy=True),
    "chaos/test_store_kill.py": Cost(20, busy=False),
    "chaos/test_cluster_chaos.py": Cost(19, busy=False),
    "integration/test_run_views.py": Cost(19, busy=False),
    "integration/test_fit_progress.py": Cost(19, busy=False),
    "integration/test_magics_cluster.py": Cost(17, busy=False),
    "integration/test_testing_plugin.py": Cost(16, busy=False),
    "integration/test_server_cluster_controls.py": Cost(13, busy=False),
    "unit/train/test_train_pieces.py": Cost(13, busy=False),
    "unit/train/test_views_agree.py": Cost(12, busy=False),
    "integration/test_cluster_lifecycle.py": Cost(12, busy=False),
    "integration/test_server_handlers.py": Cost(11, busy=False),
    "integration/test_bad_input_kernel.py": Cost(9, busy=False),
}
SHORT = Cost(1, busy=False)

#: Two cores: two busy files at once, and the files that wait beside them.
MAX_BUSY_AT_ONCE = 2
#: A worker with more than this left of its files gets a short one next: xdist sends
#: a worker its next file before the last one ends (it holds back a file's last test
#: until it knows what follows), and a long one sent then would wait there, unstarted.
STILL_BUSY_S = 10.0


def cost(path: str) -> Cost:
    """The cost of a test file, by its path under ``tests/``."""
    return COSTS.get(path.removeprefix("tests/"), SHORT)


class LongestFirst(LoadFileScheduling):
    """xdist's ``loadfile`` (a file's tests on one worker, so a module's cluster
    starts once), with the next file chosen by :func:`cost` instead of by the number of
    its tests."""

    def _assign_work_unit(self, node: WorkerController) -> None:
        self.workqueue.move_to_end(self._next_file(node), last=False)
        super()._assign_work_unit(node)

    def _next_file(self, node: WorkerController) -> str:
        waiting = list(self.workqueue)
        if self._left_on(node) > STILL_BUSY_S:
            return min(waiting, key=lambda f: cost(f).seconds)
        busy_now = sum(cost(f).busy for f in self._running())
        allowed = [f for f in waiting if busy_now < MAX_BUSY_AT_ONCE or not cost(f).busy]
        # only busy files left: run them rather than leave a worker idle
        return max(allowed or waiting, key=lambda f: cost(f).seconds)

    def _running(self) -> list[str]:
        return [
            file
            for work in self.assigned_work.values()
            for file, done in work.items()
            if not all(done.values())
        ]

    def _left_on(self, node: WorkerController) -> float:
        """The seconds of tests sent to ``node`` and not yet done, by :func:`cost`."""
        left = 0.0
        for file, done in self.assigned_work.get(node, {}).items():
            pending = sum(not d for d in done.values())
            left += cost(file).seconds * pending / len(done)
        return left
