"""ft.fit on a real cluster: bad input fails fast and leaves the cluster usable;
NaNs, stalls, slow steps, full stores and a lost cluster are handled."""

from __future__ import annotations

import functools
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.config
import pytest
import torch
from distributed import Client, LocalCluster

from ft_notebook.cluster.chaos import kill_worker
from ft_notebook.config import reload_config
from ft_notebook.events import Health, RunState, history, run_topic
from ft_notebook.exceptions import NoWorkers, RunFailed, TrainingError
from ft_notebook.runfold import RunView
from ft_notebook.server._manager import ResilienceManager
from ft_notebook.testing import poll_for, training_cluster
from ft_notebook.testing.training import CountingModel, counting_problem
from ft_notebook.train import attach, epoch_order, fit, runs

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def duo() -> Iterator[Client]:
    with training_cluster(2) as client:
        yield client


@pytest.fixture
def client(duo: Client) -> Client:
    poll_for(lambda: len(duo.scheduler_info(n_workers=-1)["workers"]) == 2, timeout=60)
    return duo


def _events(run: str, kind: str) -> list[Any]:
    return [e for e in history(run_topic(run)) if e.kind == kind]


def _works(client: Client) -> None:
    assert client.submit(sum, [20, 22], pure=False).result(timeout=30) == 42


def broken_model() -> torch.nn.Module:
    raise ValueError("this factory is broken on purpose")


def test_a_failing_model_factory_fails_the_run_within_seconds(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    problem = counting_problem()
    problem["model"] = broken_model
    started = time.monotonic()
    with pytest.raises(RunFailed, match="this factory is broken on purpose") as err:
        fit(epochs=1, cluster=client, name=unique_name, store=str(tmp_path), timeout=60, **problem)
    assert time.monotonic() - started < 20
    assert "broken_model" in str(err.value)  # the worker's traceback comes along
    _works(client)


def test_a_dataset_that_cannot_be_pickled_fails_at_once(client: Client, tmp_path: Path) -> None:
    problem = counting_problem()
    problem["data"] = _Unpicklable()
    with pytest.raises(TrainingError, match="cannot be sent to the workers"):
        fit(epochs=1, cluster=client, store=str(tmp_path), **problem)
    _works(client)


class _Unpicklable(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> Any:
        return torch.tensor(i), torch.tensor(0.0)


def test_a_batch_smaller_than_the_world_is_refused(client: Client, tmp_path: Path) -> None:
    problem = counting_problem()
    problem["batch_size"] = 1
    with pytest.raises(TrainingError, match="batch_size=1 is smaller than the 2 workers"):
        fit(epochs=1, cluster=client, store=str(tmp_path), **problem)


def test_bad_arguments_are_refused_before_anything_starts(client: Client, tmp_path: Path) -> None:
    problem = counting_problem()
    with pytest.raises(TrainingError, match="epochs must be a positive int"):
        fit(epochs=0, cluster=client, store=str(tmp_path), **problem)
    problem["model"] = CountingModel(4)  # a module, not a factory
    with pytest.raises(TrainingError, match="model= must be a factory that builds"):
        fit(epochs=1, cluster=client, store=str(tmp_path), **problem)


def test_no_workers_fails_at_once(tmp_path: Path) -> None:
    with (
        LocalCluster(n_workers=0, dashboard_address="127.0.0.1:0") as lc,
        Client(lc, set_as_default=False) as client,
    ):
        started = time.monotonic()
        with pytest.raises(NoWorkers, match="no workers"):
            fit(epochs=1, cluster=client, store=str(tmp_path), **counting_problem())
        assert time.monotonic() - started < 10


def test_a_run_is_found_again_with_its_logs(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    run = fit(
        epochs=2,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        checkpoint_every=8,
        **counting_problem(),
    )
    assert run.status.value == "COMPLETED"
    assert run.step == 16
    assert run.epoch == 2
    again = attach(unique_name, cluster=client)
    assert again.info()["step"] == 16
    assert unique_name in [r.name for r in runs(client)]
    logs = again.logs()
    assert len(logs) == 2
    assert all("finished at step 16" in text for text in logs.values())
    # rank 0 alone saves, and made its first save's memory ahead of it, once
    warming = [text.count("first checkpoint's host memory") for text in logs.values()]
    assert sorted(warming) == [0, 1], logs
    assert f"Run {unique_name!r}: COMPLETED" in repr(again)
    with pytest.raises(TrainingError, match="No run named 'nope'"):
        attach("nope", cluster=client)
    model = run.model()
    assert bool((model.counts == 2).all())


def test_a_nan_step_is_skipped_and_counted(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    run = fit(
        epochs=2,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        **counting_problem(nonfinite=(5,)),
    )
    info = run.info()
    assert info["state"] == "COMPLETED"
    assert info["nonfinite"] == 2
    # the step holding sample 5 is skipped in each epoch: its samples miss that epoch
    expected = torch.full((256,), 2.0, dtype=torch.float64)
    for epoch in range(2):
        order = torch.from_numpy(epoch_order(0, epoch, 256))
        step = int((order == 5).nonzero()) // 32
        expected[order[step * 32 : (step + 1) * 32]] -= 1
    assert torch.equal(run.model().counts.detach(), expected)
    skipped = [e.data["skipped_step"] for e in _events(unique_name, "step-skipped")]
    assert skipped == sorted(n["step"] for n in info["notes"] if n["kind"] == "nonfinite")
    assert len(skipped) == 2


def test_repeated_nans_roll_the_run_back(client: Client, tmp_path: Path, unique_name: str) -> None:
    run = fit(
        epochs=1,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        checkpoint_every=2,
        nonfinite_limit=1,
        **counting_problem(nonfinite=(7,)),
    )
    info = run.info()
    assert info["state"] == "COMPLETED", info
    rollbacks = [n for n in info["notes"] if n["kind"] == "rollback"]
    assert len(rollbacks) == 1
    assert rollbacks[0]["to_step"] <= rollbacks[0]["from_step"] - 1
    (event,) = _events(unique_name, "rolled-back")
    assert (event.data["from_step"], event.data["to_step"]) == (
        rollbacks[0]["from_step"],
        rollbacks[0]["to_step"],
    )
    counts = run.model().counts.detach()
    assert float(counts[7]) == 0.0
    assert int((counts == 1).sum()) == 256 - 32


def test_a_rollback_goes_back_past_checkpoints_due_in_its_streak(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    """Steps 5 and 6 are non-finite and the limit is two: the checkpoint due after step
    5 falls inside the streak, and the rollback goes to step 4, before the streak."""
    from ft_notebook.train._sharding import epoch_order

    order = epoch_order(0, 0, 256)  # the default seed; 32 samples a step
    in_5_and_6 = (int(order[5 * 32]), int(order[6 * 32]))
    run = fit(
        epochs=1,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        checkpoint_every=2,
        nonfinite_limit=2,
        # steps long enough for each asynchronous checkpoint to commit before the next
        **counting_problem(nonfinite=in_5_and_6, delay_s=0.1),
    )
    info = run.info()
    assert info["state"] == "COMPLETED", info
    rollbacks = [n for n in info["notes"] if n["kind"] == "rollback"]
    assert [(r["from_step"], r["to_step"]) for r in rollbacks] == [(7, 4)]
    counts = run.model().counts.detach()
    assert int((counts == 0).sum()) == 64  # the samples of the two skipped steps
    assert int((counts == 1).sum()) == 256 - 64


def test_a_rollback_with_no_checkpoint_yet_goes_back_to_the_initial_state(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    """Step 3 is non-finite and no checkpoint exists yet: the ranks rebuild the model
    and optimizer from their factories (step 0), skip step 3 and train the rest. Steps
    0-2 are trained again from the initial state, so their samples still count once."""
    order = epoch_order(0, 0, 256)  # the default seed; 32 samples a step
    run = fit(
        epochs=1,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        checkpoint_every=1000,
        nonfinite_limit=1,
        **counting_problem(nonfinite=(int(order[3 * 32]),)),
    )
    info = run.info()
    assert info["state"] == "COMPLETED", info
    rollbacks = [n for n in info["notes"] if n["kind"] == "rollback"]
    assert [(r["from_step"], r["to_step"], list(r["skipped"])) for r in rollbacks] == [(4, 0, [3])]
    counts = run.model().counts.detach()
    skipped = torch.zeros(256, dtype=torch.bool)
    skipped[torch.from_numpy(order[3 * 32 : 4 * 32])] = True
    assert bool((counts[skipped] == 0).all())
    assert bool((counts[~skipped] == 1).all()), counts[~skipped].unique()


def test_a_full_store_does_not_stop_the_run(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    """A store that fails once the run trains (a disk that fills, a folder taken away)
    does not stop it, and the run is not HEALTHY while its checkpoints fail: one that
    cannot be written at the start is refused by fit (issue 36), so the store is taken
    away after fit probed it, while the ranks warm up."""
    folder = tmp_path / "store-folder"
    run = fit(
        epochs=2,
        cluster=client,
        name=unique_name,
        store=str(folder / "ckpt"),
        checkpoint_every=2,
        wait=False,
        **counting_problem(delay_s=0.02),
    )
    shutil.rmtree(folder)
    folder.write_text("a file where the store's folder should be")
    run.wait(timeout=120)
    info = run.info()
    assert info["state"] == "COMPLETED"
    assert info["step"] == 16
    assert info["checkpoint"] is None
    assert _events(unique_name, "checkpoint-failed")
    assert info["lagging"]
    assert info["health"] == "DEGRADED"
    assert _panel_health(unique_name) == Health.DEGRADED
    # no checkpoint anywhere: the trained model comes from rank 0's memory
    assert bool((run.model().counts == 2).all())
    assert any(n["kind"] == "checkpoint-failed" for n in info["notes"])


def _panel_health(run: str) -> Health | None:
    [model] = [r for r in ResilienceManager().runs() if r.name == run]
    return model.health


def test_slow_first_steps_and_a_step_ten_times_the_median_are_not_hangs(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    settings = {"ft-notebook.train.stall-min": "100ms", "ft-notebook.train.first-steps-floor": "3s"}
    problem = counting_problem(delay_s=0.02)
    first_epoch = torch.arange(256)[torch.from_numpy(epoch_order(0, 1, 256))]
    slow_sample = int(first_epoch[100])  # in step 3 of epoch 1: 10x a 20 ms step
    problem["data"].slow = {int(first_epoch[0]): 1.5, slow_sample: 0.2}
    try:
        with dask.config.set(settings):
            reload_config()
            run = fit(epochs=2, cluster=client, name=unique_name, store=str(tmp_path), **problem)
    finally:
        reload_config()
    info = run.info()
    assert info["state"] == "COMPLETED"
    assert info["recoveries"] == [], info["recoveries"]


def test_a_rank_slower_once_than_the_rendezvous_timeout_costs_no_regroup(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    """One rank takes 3 s over one step while its peer waits in the all-reduce. With
    one timeout for the rendezvous and the collectives (1 s here) that collective
    failed and the same members formed again; collectives have their own timeout now,
    and the run keeps its first generation (the stop plan is the second)."""
    settings = {
        "ft-notebook.train.rendezvous-timeout": "1s",
        "ft-notebook.train.first-steps-floor": "30s",
        "ft-notebook.train.stall-min": "30s",
    }
    problem = counting_problem(delay_s=0.01)
    order = epoch_order(0, 0, 256)
    problem["data"].slow = {int(order[4 * 32]): 3.0}  # in step 5's batch: one rank fetches it
    problem["data"].slow_once = str(tmp_path / "slow-once")
    try:
        with dask.config.set(settings):
            reload_config()
            run = fit(epochs=1, cluster=client, name=unique_name, store=str(tmp_path), **problem)
    finally:
        reload_config()
    info = run.info()
    assert (tmp_path / "slow-once").exists()  # the slow fetch happened
    assert info["state"] == "COMPLETED"
    assert info["recoveries"] == []
    assert info["generation"] == 2, run.logs()
    assert bool((run.model().counts == 1).all())  # every sample once


def test_a_step_stuck_on_one_rank_is_evicted(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    settings = {"ft-notebook.train.stall-min": "500ms", "ft-notebook.train.first-steps-floor": "2s"}
    problem = counting_problem(delay_s=0.02)
    order = epoch_order(0, 1, 256)
    problem["data"].slow = {int(order[0]): 60.0}  # a rank hangs in a step (heartbeats go on)
    problem["data"].slow_once = str(tmp_path / "hung-once")
    try:
        with dask.config.set(settings):
            reload_config()
            run = fit(
                epochs=2,
                cluster=client,
                name=unique_name,
                store=str(tmp_path),
                wait=False,
                **problem,
            )
    finally:
        reload_config()
    run.wait(timeout=120)
    info = run.info()
    assert info["state"] == "COMPLETED"
    assert len(info["recoveries"]) >= 1, info
    assert "step not advancing" in info["recoveries"][0]["cause"]


def test_a_step_stuck_on_every_rank_fails_the_run_saying_so(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    """No rank to go on with: rather than show RUNNING for ever, the run fails after
    three stall thresholds, naming the step and what to look at."""
    settings = {"ft-notebook.train.stall-min": "500ms", "ft-notebook.train.first-steps-floor": "2s"}
    problem = counting_problem(delay_s=0.02)
    order = epoch_order(0, 0, 256)
    # step 6's batch, split between the two ranks: each fetches one of these (30 s)
    problem["data"].slow = {int(order[6 * 32]): 30.0, int(order[6 * 32 + 31]): 30.0}
    try:
        with dask.config.set(settings):
            reload_config()
            run = fit(
                epochs=1,
                cluster=client,
                name=unique_name,
                store=str(tmp_path),
                wait=False,
                **problem,
            )
    finally:
        reload_config()
    # three first-steps floors (2 s) after step 6 began, long before the fetches end
    poll_for(lambda: run.info()["state"] == "FAILED", timeout=25, what="the run to fail")
    reason = run.info()["reason"]
    assert "has been computing step 6" in reason, reason
    assert "resume=True" in reason


def test_below_min_workers_the_run_stalls_and_resumes(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    run = fit(
        epochs=4,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        min_workers=2,
        wait=False,
        **counting_problem(delay_s=0.04),
    )
    info = poll_for(lambda: (i := run.info())["step"] >= 4 and i, timeout=60)
    kill_worker(client, str(info["members"][1]))
    poll_for(lambda: run.info()["state"] == "STALLED", timeout=30, what="STALLED")
    run.wait(timeout=120)  # the nanny restarts the worker; the run resumes with 2
    info = run.info()
    assert info["state"] == "COMPLETED"
    assert bool((run.model().counts == 4).all())


def test_resume_continues_from_the_newest_checkpoint_after_the_cluster_is_lost(
    tmp_path: Path, unique_name: str
) -> None:
    store = str(tmp_path / "ckpt")
    problem = counting_problem(delay_s=0.05)
    with training_cluster(2) as client:
        run = fit(
            epochs=4,
            cluster=client,
            name=unique_name,
            store=store,
            checkpoint_every=4,
            wait=False,
            **problem,
        )
        poll_for(lambda: (run.info()["checkpoint"] or 0) >= 8, timeout=60, what="a checkpoint")
    # the whole cluster is gone; a new one resumes
    with training_cluster(2) as client:
        run = fit(
            epochs=4,
            cluster=client,
            name=unique_name,
            store=store,
            resume=True,
            timeout=120,
            **problem,
        )
        info = run.info()
        assert info["state"] == "COMPLETED"
        assert (info["resumed_from"] or 0) >= 8
        assert bool((run.model().counts == 4).all())
    _views_agree_with_the_run(unique_name, info)


def _views_agree_with_the_run(name: str, info: dict[str, Any]) -> None:
    """Issue 33: a resumed run that ended COMPLETED and HEALTHY showed COMPLETED ·
    DEGRADED in the panel (the old run's health, which lost its workers as its cluster
    closed). The journal's fold, which dashboards read, and the REST payload the panel
    reads, say what ``run.info()`` says."""
    events = history(run_topic(name))
    starts = [i for i, e in enumerate(events) if e.kind == "run-started"]
    assert len(starts) == 2, [e.kind for e in events]
    old_run = functools.reduce(RunView.apply, events[: starts[1]], RunView())
    assert old_run.state is RunState.CANCELLED  # it ended with its cluster, and said so
    view = functools.reduce(RunView.apply, events, RunView())
    [panel] = [r for r in ResilienceManager().runs() if r.name == name]
    for seen in (view, panel):
        assert (seen.state, seen.health) == (RunState(info["state"]), Health(info["health"]))
        assert (seen.step, seen.checkpoint_step) == (info["step"], info["checkpoint"])
        assert seen.world_size == info["world_size"]
    assert view.recoveries == ()
    assert panel.recoveries == ()
    assert info["recoveries"] == []


def test_wait_follows_the_events_and_asks_for_the_record_once(
    client: Client, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: ``wait()`` pulled the whole record (119 KB once the history is full)
    ten times a second. It follows the run's events now: the record once at the end,
    the state alone every few seconds."""
    from ft_notebook.train.kernel import _follow, _handle

    run = fit(
        epochs=2,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        wait=False,
        **counting_problem(delay_s=0.02),
    )
    asked: list[str] = []
    real = _handle.ask

    def counted(client: Any, action: Any, **kwargs: Any) -> Any:
        asked.append(action.value)
        return real(client, action, **kwargs)

    monkeypatch.setattr(_handle, "ask", counted)
    # only the run's events can end this wait: the state is checked once, at its start
    monkeypatch.setattr(_follow, "CHECK_S", 3600.0)
    started = time.monotonic()
    run.wait(timeout=120, progress=False)
    waited = time.monotonic() - started
    assert asked.count("info") == 1, asked  # the end: errors, and the final record
    assert asked.count("state") == 1, (asked, waited)
    assert run.status.value == "COMPLETED"


def test_a_resume_with_other_data_settings_is_refused(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    """The checkpoint's step tells which samples are still to come only with the seed,
    batch size and dataset it was taken with: with others, a resume would skip some
    samples and use others twice. It is refused before anything starts."""
    store, again = str(tmp_path), {"cluster": client, "name": unique_name, "resume": True}
    fit(epochs=1, cluster=client, name=unique_name, store=store, **counting_problem())
    with pytest.raises(TrainingError, match=r"batch_size 32 then, 64 now"):
        fit(epochs=2, store=store, **again, **counting_problem(batch=64))
    with pytest.raises(TrainingError, match=r"seed 0 then, 1 now"):
        fit(epochs=2, store=store, seed=1, **again, **counting_problem())
    with pytest.raises(TrainingError, match=r"samples 256 then, 512 now"):
        fit(epochs=2, store=store, **again, **counting_problem(size=512))
    run = fit(epochs=2, store=store, **again, **counting_problem())  # the same: it goes on
    assert run.info()["state"] == "COMPLETED"
    assert run.info()["resumed_from"] == 8
    assert bool((run.model().counts == 2).all())


def mean_count(model: torch.nn.Module) -> dict[str, float]:
    return {"mean_count": float(model.counts.detach().mean())}


def slow_mean_count(model: torch.nn.Module) -> dict[str, float]:
    time.sleep(12)  # once, every rank waited this long in the next collective
    return mean_count(model)


def halving(optimizer: torch.optim.Optimizer) -> Any:
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=8, gamma=0.5)


def squared_error_step(model: torch.nn.Module, batch: Any, loss: Any) -> torch.Tensor:
    inputs, targets = batch
    return ((model(inputs) - targets) ** 2).mean()


def test_scheduler_clipping_eval_and_a_custom_step(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    from ft_notebook.store import CheckpointStore
    from ft_notebook.testing.training import regression_problem

    problem = regression_problem(size=256, batch=32)
    problem["loss"] = None
    run = fit(
        epochs=3,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        lr_scheduler=halving,
        clip_grad_norm=1.0,
        train_step=squared_error_step,
        **problem,
    )
    info = run.info()
    assert info["state"] == "COMPLETED"
    x, y = problem["data"].tensors
    torch.manual_seed(0)  # as every rank does before building the model
    untrained = problem["model"]()
    with torch.no_grad():
        assert squared_error_step(run.model(), (x, y), None) < squared_error_step(
            untrained, (x, y), None
        )
    state = CheckpointStore(str(tmp_path)).load(unique_name).state
    assert state["lr_scheduler"]["last_epoch"] == 24  # stepped once per committed step
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(1e-2 * 0.5**3)

    counted = fit(
        epochs=2,
        cluster=client,
        name=f"{unique_name}-eval",
        store=str(tmp_path),
        eval_fn=mean_count,
        eval_every=4,
        **counting_problem(),
    )
    evals = [p["eval"]["mean_count"] for p in counted.info()["history"] if "eval" in p]
    assert evals == [s / 8 for s in (4, 8, 12, 16)]  # mean count after 4, 8, 12, 16 steps


def test_a_long_evaluation_does_not_hold_up_training(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    """Rank 0 evaluates a copy of the model in the background: the other rank does
    not wait for it in a collective, and the coordinator sees no stuck step."""
    run = fit(
        epochs=5,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        eval_fn=slow_mean_count,
        eval_every=60,
        **counting_problem(size=512, batch=32, delay_s=0.1),
    )
    info = run.info()
    assert info["state"] == "COMPLETED", info
    assert info["recoveries"] == []
    [evaluated] = [p for p in info["history"] if "eval" in p]
    assert evaluated["step"] == 60
    assert evaluated["eval"]["mean_count"] == 60 / 16  # the weights of step 60, not later
    trained_meanwhile = [
        p for p in info["history"] if p["step"] > 60 and p["time"] < evaluated["eval_time"]
    ]
    assert trained_meanwhile, info["history"]


class UncopyableCounts(CountingModel):
    """A model ``copy.deepcopy`` refuses (it holds a lock): rank 0 evaluates it on the
    training thread, while its peer waits in the next collective."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.lock = threading.Lock()


def three_second_mean_count(model: torch.nn.Module) -> dict[str, float]:
    time.sleep(3)
    return mean_count(model)


def test_an_evaluation_on_the_training_thread_longer_than_the_rendezvous_timeout_costs_no_regroup(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    """With one timeout for rendezvous and collectives (1 s here), the peer's
    collective failed while rank 0 evaluated for 3 s, and the same members formed
    again; collectives have their own timeout now."""
    problem = counting_problem(size=256, batch=32)
    problem["model"] = functools.partial(UncopyableCounts, 256)
    try:
        with dask.config.set({"ft-notebook.train.rendezvous-timeout": "1s"}):
            reload_config()
            run = fit(
                epochs=1,
                cluster=client,
                name=unique_name,
                store=str(tmp_path),
                eval_fn=three_second_mean_count,
                eval_every=4,
                **problem,
            )
    finally:
        reload_config()
    info = run.info()
    assert info["state"] == "COMPLETED", info
    assert "on the training thread" in run.logs()["0"]  # the copy was refused, as meant
    assert info["recoveries"] == []
    assert info["generation"] == 2, run.logs()  # the first, then the stop plan
    evals = [p["eval"]["mean_count"] for p in info["history"] if "eval" in p]
    assert evals == [4 / 8, 1.0]  # steps 4 and 8 of 8: each sample counted once by then
    assert bool((run.model().counts == 1).all())


def test_a_cancelled_run_stops_and_the_cluster_stays_usable(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    from ft_notebook.train.rank._actor import rank_state

    run = fit(
        epochs=50,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        wait=False,
        **counting_problem(delay_s=0.02),
    )
    poll_for(lambda: run.info()["step"] >= 2, timeout=60, what="a few steps")
    run.cancel()
    assert run.wait(timeout=30).status.value == "CANCELLED"
    poll_for(
        lambda: all('"alive": false' in s for s in client.run(rank_state, unique_name).values()),
        timeout=30,
        what="every rank actor stopped",
    )
    stopped_at = run.step
    assert stopped_at < 50 * 8
    _works(client)


def test_a_run_name_used_again_on_the_same_cluster_meets_no_old_keys(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    # the rendezvous store outlives runs, so the second run must form its groups under
    # prefixes of its own (that they differ is asserted in the unit tests; meeting the
    # old keys fails only when a rank reads one before its peer overwrites it)
    fit(
        epochs=1,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        timeout=60,
        **counting_problem(),
    )
    again = fit(
        epochs=2,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        resume=True,
        timeout=60,
        **counting_problem(),
    )
    info = again.info()
    assert info["state"] == "COMPLETED"
    assert info["resumed_from"] == 8
    assert bool((again.model().counts == 2).all())


def test_a_new_run_does_not_meet_an_old_runs_checkpoints(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    fit(
        epochs=1,
        cluster=client,
        name=unique_name,
        store=str(tmp_path),
        timeout=60,
        **counting_problem(),
    )
    with pytest.raises(TrainingError, match="already has checkpoints of a run named"):
        fit(epochs=1, cluster=client, name=unique_name, store=str(tmp_path), **counting_problem())


def test_a_name_submitted_again_right_after_cancel_starts_a_new_run(
    client: Client, tmp_path: Path, unique_name: str
) -> None:
    run = fit(
        epochs=50,
        cluster=client,
        name=unique_name,
        store=str(tmp_path / "a"),
        wait=False,
        **counting_problem(delay_s=0.02),
    )
    poll_for(lambda: run.info()["step"] >= 2, timeout=60, what="a few steps")
    run.cancel()
    again = fit(
        epochs=1,
        cluster=client,
        name=unique_name,
        store=str(tmp_path / "b"),
        timeout=60,
        **counting_problem(),
    )
    assert again.info()["state"] == "COMPLETED"
    assert bool((again.model().counts == 1).all())
