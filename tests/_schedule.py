"""The order ``make test`` runs its files in under pytest-xdist: the longest first, never
more than two that keep the cores busy at once.

The suite is CPU-bound on two cores, but many of its longest files mostly wait: the
demos are played at a person's pace (15 s pauses), training runs read their samples
slowly as data from disk is, restarted workers take seconds to come back. xdist's own
order (``--dist loadfile``) sends the files with the most tests first, so the demos,
with one test each, ran last and together, one core idle for the last minute and more.
Sent first all at once instead, the training drills, the own-cluster runs and the
browsers overloaded the cores and tests failed from it (a survivor taken for hung and
evicted, a breaker opened on a late health check). So: longest first, at most
:data:`MAX_BUSY_AT_ONCE` busy files running, the waiting ones beside them.
"""

from __future__ import annotations

from typing import NamedTuple

from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController


class Cost(NamedTuple):
    seconds: float  # the file's tests and fixtures, wall time
    cpu_s: float = 0.0  # CPU time of every process on the machine meanwhile

    @property
    def busy(self) -> bool:
        """Keeps a core busy most of the time it runs (trains hard, drives a browser,
        serves a load, builds a wheel), where the others mostly wait (for steps paced
        like data read from disk, for a person looking, for a restart)."""
        return self.cpu_s >= 0.6 * self.seconds


#: Each file alone on this 2-core machine (``pytest -n 0 FILE``; CPU from
#: ``/proc/stat`` before and after); the shorter ones, without CPU, from
#: ``pytest -n 4 --dist loadfile --durations=0`` summed by file. A file not named here
#: is taken to be short (unit tests).
COSTS = {
    "chaos/test_train_drills.py": Cost(86, 69),
    "integration/test_demo_04.py": Cost(85, 31),
    "chaos/test_train_drills_cases.py": Cost(82, 80),
    "integration/test_train_runs.py": Cost(80, 15),
    "integration/test_own_cluster.py": Cost(78, 30),
    "browser/test_labextension_browser.py": Cost(72, 73),
    "integration/test_demo_02.py": Cost(72, 25),
    "integration/test_demo_02_restart.py": Cost(71, 26),
    "integration/test_demo_03.py": Cost(71, 47),  # 8 callers load the service throughout
    "chaos/test_train_chaos.py": Cost(68, 28),
    "browser/test_dashboard_browser.py": Cost(40, 36),
    "integration/test_demo_01.py": Cost(38, 7),
    "security/test_listeners.py": Cost(36, 14),
    "integration/test_wheel.py": Cost(33, 32),
    "integration/test_snapshot_zoo.py": Cost(27, 27),
    "integration/test_demos.py": Cost(27),
    "integration/test_dashboard_notebook.py": Cost(25, 25),
    "integration/test_restore_continuation.py": Cost(24),
    "integration/test_serve.py": Cost(24),
    "integration/test_magics_kernel.py": Cost(22, 18),
    "integration/test_cluster_recovery.py": Cost(22, 18),
    "browser/test_lab_cluster_controls_browser.py": Cost(22, 19),
    "browser/test_lab_dashboards_browser.py": Cost(20, 18),
    "chaos/test_store_kill.py": Cost(20),
    "chaos/test_cluster_chaos.py": Cost(19),
    "integration/test_run_views.py": Cost(19),
    "integration/test_fit_progress.py": Cost(19),
    "integration/test_readme.py": Cost(19, 17),
    "integration/test_friction.py": Cost(18, 18),
    "integration/test_magics_cluster.py": Cost(17),
    "integration/test_testing_plugin.py": Cost(16),
    "integration/test_server_cluster_controls.py": Cost(13),
    "unit/train/test_train_pieces.py": Cost(13),
    "unit/train/test_views_agree.py": Cost(12),
    "integration/test_cluster_lifecycle.py": Cost(12),
    "integration/test_server_handlers.py": Cost(11),
    "integration/test_bad_input_kernel.py": Cost(9),
}
SHORT = Cost(1)

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
