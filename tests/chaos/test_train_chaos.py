"""Training survives real faults of real worker processes, and no sample is lost or
used twice: the counting model's parameters count every sample's uses through the
real all-reduce, so after ``e`` epochs each one must be exactly ``e``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import dask.config
import pytest
import torch
from distributed import Client

from ft_notebook.cluster.chaos import hang_worker, kill_worker
from ft_notebook.config import reload_config
from ft_notebook.testing import poll_for, training_cluster
from ft_notebook.testing.training import batchnorm_problem, counting_problem, regression_problem
from ft_notebook.train import Run, attach, epoch_order, fit

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

WORKERS = 3
EPOCHS = 4


@pytest.fixture(scope="module")
def trio() -> Iterator[Client]:
    """3 worker processes under nannies, 200 ms heartbeats, the control plane on."""
    with training_cluster(WORKERS) as client:
        yield client


@pytest.fixture
def client(trio: Client) -> Client:
    """The trio with all of its workers back (a test before may have killed one)."""
    poll_for(
        lambda: len(trio.scheduler_info(n_workers=-1)["workers"]) == WORKERS,
        timeout=60,
        what=f"{WORKERS} workers",
    )
    return trio


def _start(client: Client, name: str, tmp: Any, **kw: Any) -> Run:
    problem = counting_problem(size=256, batch=32, delay_s=0.04)
    problem.update(kw)
    return fit(
        epochs=EPOCHS,
        cluster=client,
        name=name,
        store=str(tmp / "ckpt"),
        wait=False,
        checkpoint_every=8,
        **problem,
    )


def _at_step(run: Run, step: int) -> dict[str, Any]:
    return poll_for(
        lambda: (i := run.info())["step"] >= step and i["state"] == "RUNNING" and i,
        timeout=120,
        what=f"step {step} of {run.name}",
    )


def _member(info: dict[str, Any], index: int) -> str:
    return str(info["members"][index])


def _finished(run: Run, timeout: float = 180) -> dict[str, Any]:
    run.wait(timeout=timeout)
    info = run.info()
    assert info["state"] == "COMPLETED", info
    return info


def _exact_counts(run: Run) -> None:
    counts = run.model().counts.detach()
    wrong = (counts != EPOCHS).nonzero().flatten().tolist()
    assert wrong == [], (
        f"samples not used exactly {EPOCHS} times: {[(i, float(counts[i])) for i in wrong[:10]]}"
    )


def test_a_killed_worker_is_survived_on_the_fast_path(
    client: Client, tmp_path: Any, unique_name: str
) -> None:
    run = _start(client, unique_name, tmp_path)
    # the fast path needs the survivor groups, built in the background once a
    # generation trains: at steps 6 and 12 two fresh clones' make test, four files at a
    # time on 2 cores, had not built them yet, and the run took the slow path
    _at_step(run, 6)
    info = poll_for(
        lambda: (i := run.info())["fast_path_ready"] and i, timeout=60, what="survivor groups"
    )
    kill_worker(client, _member(info, 2))
    info = _finished(run)
    _exact_counts(run)
    first = info["recoveries"][0]
    # on a miss, what the run did and its ranks said: which path, and what came first
    assert first["how"] == "survive", (info["recoveries"], run.logs())
    assert first["workers_before"] == 3
    assert first["workers_after"] == 2
    assert first["steps_lost"] == 0
    # The goal (survivors training again in a fraction of a second) is measured idle by
    # benchmarks/bench_train.py (86.8 ms median). Here the suite runs four files at a
    # time on 2 cores: 0.10-0.14 s beside three busy loops, but 1.23 s once in CI beside
    # browsers and kernels. The path taken (above) is what this test holds; the bound
    # only catches a recovery that waits on a timeout.
    assert first["rto_s"] < 2.5, (first, run.logs())
    assert first["verified"] is True  # the survivors checked the state they went on from


def test_a_hung_worker_is_evicted_and_survived(
    client: Client, tmp_path: Any, unique_name: str
) -> None:
    run = _start(client, unique_name, tmp_path)
    info = _at_step(run, 6)
    hang_worker(client, _member(info, 1))
    info = _finished(run)
    _exact_counts(run)
    first = info["recoveries"][0]
    assert "heartbeat" in first["cause"], first
    assert first["steps_lost"] == 0, first
    assert first["rto_s"] < 2.5, first


def test_two_kills_in_a_row(client: Client, tmp_path: Any, unique_name: str) -> None:
    run = _start(client, unique_name, tmp_path, min_workers=1)
    info = _at_step(run, 4)
    kill_worker(client, _member(info, 2))
    poll_for(lambda: len(run.recoveries) >= 1, timeout=30, what="the first recovery")
    info = _at_step(run, info["step"] + 3)
    kill_worker(client, _member(info, 0))
    info = _finished(run)
    _exact_counts(run)
    assert len(info["recoveries"]) >= 2
    assert all(r["steps_lost"] == 0 for r in info["recoveries"])


def test_a_kill_during_recovery_takes_the_slow_path(
    client: Client, tmp_path: Any, unique_name: str
) -> None:
    # rank 0 spends 2 s fetching the first sample of step 6: a recovery that starts
    # then cannot finish before it is back, so a second kill lands during it
    marker = tmp_path / "rank-0-is-slow"
    problem = counting_problem(size=256, batch=32, delay_s=0.04)
    problem["data"].slow = {int(epoch_order(0, 0, 256)[6 * 32]): 2.0}
    problem["data"].slow_once = str(marker)
    run = fit(
        epochs=EPOCHS,
        cluster=client,
        name=unique_name,
        store=str(tmp_path / "ckpt"),
        wait=False,
        checkpoint_every=8,
        **problem,
    )
    poll_for(marker.exists, timeout=60, what="rank 0 in its slow step")
    members = run.info()["members"]
    kill_worker(client, str(members[2]))
    poll_for(lambda: run.info()["state"] == "RECOVERING", timeout=10, what="RECOVERING")
    kill_worker(client, str(members[1]))
    info = _finished(run)
    _exact_counts(run)
    first = info["recoveries"][0]
    assert str(members[2]) in first["cause"]
    assert str(members[1]) in first["cause"]  # one recovery, both losses
    assert first["how"] == "form"  # two losses: a new rendezvous, not a prepared group
    # the survivor, and the killed ones only if they were back (restarted, warm) in time
    # to be admitted into the recovery's generation while rank 0 was still slow
    back = [j for j in info["joins"] if j["generation"] <= first["generation"]]
    assert first["workers_after"] == 1 + len(back), (first, info["joins"])
    assert all(r["steps_lost"] == 0 for r in info["recoveries"])


def test_a_member_that_cannot_meet_its_peers_is_evicted_and_the_others_go_on(
    client: Client, tmp_path: Any, unique_name: str
) -> None:
    """Worker 1 is cut off its peers (``%ft chaos isolate``) before the run: every
    rendezvous of the three fails. Before, the same members were formed again until
    the run failed; now, after the capped number of forms, the member the others never
    saw arrive is evicted, the other two train the run to the end with every sample
    used exactly once, and the eviction is a recovery naming it."""
    from ft_notebook.train.coordinator._evictions import REFORMS_CAP
    from ft_notebook.train.rank._partition import isolate_worker, reconnect_worker

    assert isolate_worker(client, "1") == "1"
    try:
        with dask.config.set({"ft-notebook.train.rendezvous-timeout": "1s"}):
            reload_config()
            run = _start(client, unique_name, tmp_path)
        info = _finished(run)
    finally:
        reload_config()
        assert reconnect_worker(client, "1")
    _exact_counts(run)
    assert list(info["evicted"]) == ["1"], info["evicted"]
    assert "did not see it arrive" in info["evicted"]["1"]
    [recovery] = info["recoveries"]
    assert recovery["cause"].startswith("1: could not meet its peers"), recovery
    assert f"{REFORMS_CAP} forms of the same 3 workers failed" in recovery["cause"]
    assert (recovery["workers_before"], recovery["workers_after"]) == (3, 2)
    assert recovery["verified"] is True
    # the evicted rank actor stopped (its model and data go), told so by the run
    from ft_notebook.train.rank._actor import rank_logs, rank_state

    [address] = [
        a
        for a, w in client.scheduler_info(n_workers=-1)["workers"].items()
        if str(w["name"]) == "1"
    ]

    def stopped() -> bool:
        state = json.loads(client.run(rank_state, unique_name, workers=[address])[address])
        return state is not None and state["alive"] is False

    poll_for(stopped, timeout=30, what="the evicted rank actor to stop")
    assert "stopping: evicted" in client.run(rank_logs, unique_name, workers=[address])[address]


def test_a_restarted_worker_rejoins(client: Client, tmp_path: Any, unique_name: str) -> None:
    run = fit(
        epochs=20,
        cluster=client,
        name=unique_name,
        store=str(tmp_path / "ckpt"),
        wait=False,
        checkpoint_every=8,
        **counting_problem(size=256, batch=32, delay_s=0.05),
    )
    info = _at_step(run, 4)
    victim = _member(info, 2)
    kill_worker(client, victim)
    # the nanny restarts it under the same name; it warms up and is admitted again
    back = poll_for(
        lambda: (
            (i := run.info())["world_size"] == 3 and i["generation"] > info["generation"] + 1 and i
        ),
        timeout=60,
        what="the restarted worker training again",
    )
    assert victim in back["members"]
    run.wait(timeout=180)
    counts = run.model().counts.detach()
    assert bool((counts == 20).all()), counts
    # its join is timed from the worker registering and from its rank ready to train
    (join,) = [j for j in run.info()["joins"] if j["name"] == str(victim)]
    assert join["arrived_at"] <= join["ready_at"] <= join["trained_at"], join
    assert join["rejoin_s"] >= join["from_ready_s"] >= 0, join
    assert run.info()["health"] == "HEALTHY"
    # the rendezvous store keeps no key of the run's retired groups
    poll_for(
        lambda: not [k for k in client.run_on_scheduler(_store_keys) if f"/{unique_name}/" in k],
        timeout=10,
        what="the run's rendezvous keys deleted",
    )


def _store_keys(dask_scheduler: Any) -> list[str]:
    from ft_notebook.cluster.plugins import control_plane

    rendezvous = control_plane(dask_scheduler).rendezvous
    return [] if rendezvous is None else list(rendezvous.data)


STARTER = textwrap.dedent(
    """
    import sys
    from distributed import Client
    from ft_notebook.testing.training import counting_problem
    from ft_notebook.train import fit
    client = Client(sys.argv[1])
    fit(epochs=4, cluster=client, name=sys.argv[2], store=sys.argv[3], wait=False,
        checkpoint_every=8, **counting_problem(size=256, batch=32, delay_s=0.04))
    print("started", flush=True)
    sys.stdin.read()  # a kernel that lives until it is killed
    """
)


def test_the_run_outlives_the_process_that_started_it(
    client: Client, tmp_path: Any, unique_name: str
) -> None:
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            STARTER,
            client.scheduler.address,
            unique_name,
            str(tmp_path / "ckpt"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as starter:
        try:
            assert starter.stdout is not None
            assert starter.stdout.readline().strip() == "started"
            run = attach(unique_name, cluster=client)
            _at_step(run, 3)
            os.kill(starter.pid, signal.SIGKILL)
            starter.wait(timeout=30)
        finally:
            if starter.poll() is None:
                starter.kill()
    steps_then = run.step
    info = _finished(run)
    assert info["step"] > steps_then
    factory = counting_problem(size=256, batch=32)["model"]
    _exact_counts(Run(client, unique_name, model_factory=factory, store_url=str(tmp_path / "ckpt")))


def _final_state(run: Run) -> dict[str, torch.Tensor]:
    """The whole state_dict: parameters and buffers (BatchNorm's running statistics)."""
    return {k: v.detach().clone() for k, v in run.model().state_dict().items()}


def _clean_and_faulty(
    client: Client,
    tmp_path: Any,
    name: str,
    problem: dict[str, Any] | None = None,
    kill_at: int = 5,
    member: int = 1,
    **options: Any,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Final states of one run without a failure and one with a worker killed."""
    kw = {
        "epochs": 3,
        "cluster": client,
        "checkpoint_every": 8,
        "wait": False,
        **(problem or regression_problem(size=256, batch=32, delay_s=0.04)),
        **options,
    }
    clean = fit(name=f"{name}-clean", store=str(tmp_path / "a"), **kw)
    clean.wait(timeout=180)
    poll_for(lambda: len(client.scheduler_info(n_workers=-1)["workers"]) == WORKERS, timeout=60)
    faulty = fit(name=f"{name}-faulty", store=str(tmp_path / "b"), **kw)
    info = _at_step(faulty, kill_at)
    kill_worker(client, _member(info, member))
    info = _finished(faulty)
    assert info["recoveries"], info
    assert all(r["verified"] for r in info["recoveries"]), info["recoveries"]
    return _final_state(clean), _final_state(faulty)


def test_deterministic_runs_end_bit_identical_with_and_without_a_failure(
    client: Client, tmp_path: Any, unique_name: str
) -> None:
    clean, faulty = _clean_and_faulty(client, tmp_path, unique_name, deterministic=True)
    for k in clean:
        assert torch.equal(clean[k], faulty[k]), k


def test_batchnorm_statistics_end_bit_identical_after_a_lost_worker(
    client: Client, tmp_path: Any, unique_name: str
) -> None:
    """The issue's case: before, every parameter matched while running_var was off by
    0.41 and num_batches_tracked said 225 against 180, and the recovery said verified."""
    clean, faulty = _clean_and_faulty(
        client,
        tmp_path,
        unique_name,
        problem=batchnorm_problem(delay_s=0.01),
        kill_at=17,
        member=WORKERS - 1,
        epochs=6,
        deterministic=True,
    )
    assert int(clean["1.num_batches_tracked"]) > 60  # updated per part, not once per rank
    for k in clean:
        assert torch.equal(clean[k], faulty[k]), (k, clean[k], faulty[k])


def test_without_deterministic_a_failure_changes_the_result_only_within_tolerance(
    client: Client, tmp_path: Any, unique_name: str
) -> None:
    clean, faulty = _clean_and_faulty(client, tmp_path, unique_name)
    for k in clean:  # float32 sums in another order
        torch.testing.assert_close(clean[k], faulty[k], rtol=1e-4, atol=1e-5)
