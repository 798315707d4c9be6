"""The notebook's side of a run: ``fit`` starts it, a :class:`Run` follows it.

A ``Run`` is only a handle: the run itself is driven by the coordinator in the
scheduler and the rank actors in the workers, so it goes on when this kernel dies;
``attach(name)`` and ``runs()`` find it again from a new one.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from ft_notebook._paths import checked_name, data_dir
from ft_notebook.cluster import client_for
from ft_notebook.events import RunState
from ft_notebook.exceptions import NoWorkers, RunFailed, StoreError, TrainingError
from ft_notebook.train._earlier import refuse_another_order, refuse_old_checkpoints
from ft_notebook.train._mtbf import planning_mtbf
from ft_notebook.train._robust import rule_of, smallest_world
from ft_notebook.train._schedule import FIRST_AUTO_STEP
from ft_notebook.train._spec import FitSpec, dumps_spec


def fit(
    model: Callable[[], Any],
    data: Any,
    optimizer: Callable[[Any], Any],
    loss: Callable[..., Any] | None = None,
    *,
    epochs: int = 1,
    batch_size: int = 32,
    cluster: Any = None,
    name: str | None = None,
    store: Any = None,
    checkpoint_every: int | str | None = None,
    min_workers: int | None = None,
    max_workers: int | None = None,
    resume: bool = False,
    deterministic: bool = False,
    wait: bool = True,
    seed: int = 0,
    lr_scheduler: Callable[[Any], Any] | None = None,
    train_step: Callable[..., Any] | None = None,
    eval_fn: Callable[[Any], dict[str, float]] | None = None,
    eval_every: int = 0,
    clip_grad_norm: float | None = None,
    chunk_size: int | None = None,
    fast_recovery: bool | None = None,
    nonfinite_limit: int | None = None,
    device: str | None = None,
    amp: bool | None = None,
    aggregator: Any = "mean",
    on_violation: str | None = None,
    timeout: float | None = None,
) -> Run:
    """Train ``model`` data-parallel on the cluster; survive the loss of workers.

    ``model`` and ``optimizer`` are factories (``optimizer(params)``) built on every
    worker; ``data`` is a map-style dataset or a factory of one; ``loss(output,
    target)`` is a mean over the batch (or give ``train_step(model, batch, loss)``
    returning the loss). ``batch_size`` is the global batch, split among the workers
    at every step. Returns a :class:`Run` (finished when ``wait=True``).

    ``checkpoint_every``, ``min_workers``, ``fast_recovery``, ``nonfinite_limit``,
    ``device`` and ``amp`` left out (None) come from the configuration, the keys of
    those names under ``ft-notebook.train`` (defaults in ``ft_notebook.yaml``, set
    like any Dask setting: ``DASK_FT_NOTEBOOK__TRAIN__CHECKPOINT_EVERY=100``), and so
    do the run's other settings (timeouts, hang detection, float64 sums, how many
    checkpoints a ``store`` given as a URL keeps). They are read once, here, in this
    kernel, and the run keeps them: the workers' configuration plays no part.
    ``checkpoint_every="auto"``: rank 0 plans Daly's interval (:mod:`ft_notebook.plan`)
    from the run's own measured save cost (the time a save holds training), its step
    time and an MTBF: the failure rate the cluster's journal recorded once it holds 3
    failures, else ``ft-notebook.train.mtbf`` (:mod:`._mtbf`); it plans again after
    every save; ``run.info()["checkpoint_plan"]`` is the newest plan (with
    ``mtbf_source``) and ``["checkpoint_cost_s"]`` the measured cost. ``epochs``,
    ``batch_size`` and ``seed`` are arguments only, with the defaults shown, since
    they change what the run computes.

    ``aggregator``: how the workers' gradients are combined at each step. ``"mean"``
    all-reduces; a robust rule of :mod:`ft_notebook.robust` (``"median"``,
    ``"trimmed-mean"``, ``"geometric-median"``, ``"krum"``, ``"multi-krum"``,
    ``"centered-clipping"``, ``"nnm+<rule>"``: each tolerating one bad worker; or
    ``ft_notebook.robust.aggregator(name, f=2, ...)``) gathers every worker's
    gradient and every rank applies the rule, so bad gradients from up to f workers
    move the step by a bounded amount. ``on_violation`` (``ft-notebook.train.on-violation``):
    ``"stall"`` waits, STALLED, while too few workers are left for the rule's
    condition, ``"mean"`` trains on with the mean meanwhile.

    Raises:
        TrainingError: bad arguments, or a run of this name is active.
        NoWorkers: the cluster has no workers.
        RunFailed: (with ``wait=True``) a worker raised; the message has its traceback.
    """
    from ft_notebook.train._record import Options

    name = checked_name(
        name or f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}", "run name"
    )
    store_url, store_keep = _store_location(store)
    auto = checkpoint_every == "auto"
    if auto:  # the first save comes early, to measure what a save costs
        checkpoint_every = FIRST_AUTO_STEP
    spec = FitSpec(
        model=model,
        optimizer=optimizer,
        loss=loss,
        data=data,
        epochs=epochs,
        batch_size=batch_size,
        seed=seed,
        lr_scheduler=lr_scheduler,
        train_step=train_step,
        eval_fn=eval_fn,
        eval_every=eval_every,
        clip_grad_norm=clip_grad_norm,
        deterministic=deterministic,
        chunk_size=chunk_size,
        store_url=store_url,
        store_keep=store_keep,
        resume=resume,
        **_given(
            checkpoint_every=checkpoint_every,
            nonfinite_limit=nonfinite_limit,
            device=device,
            amp=amp,
        ),
    )
    spec.checkpoint_auto = auto
    spec.aggregator = rule_of(aggregator)
    if on_violation is not None:
        spec.on_violation = on_violation
    spec.validate()
    try:
        size = len(data) if hasattr(data, "__len__") else None
    except TypeError:
        size = None
    options = Options(
        max_workers=max_workers,
        total_steps=-(-size // batch_size) * epochs if size else 0,
        **_given(min_workers=min_workers, fast_recovery=fast_recovery),
    )
    if spec.aggregator is not None and spec.on_violation == "stall":
        # too few workers for the rule: the run stalls, as below min_workers
        options.min_workers = max(options.min_workers, smallest_world(spec.aggregator))
    options.validate()
    if not resume:
        refuse_old_checkpoints(name, spec.store_url)
    elif size is not None:
        refuse_another_order(name, spec.store_url, seed, batch_size, size)
    client = client_for(cluster)
    if auto:
        mtbf = planning_mtbf(client, spec.mtbf_s, spec.mtbf_from_journal)
        spec.mtbf_s, spec.mtbf_source = mtbf.seconds, mtbf.source
    payload = dumps_spec(spec)
    workers = len(client.scheduler_info(n_workers=-1)["workers"])
    if workers == 0:
        raise NoWorkers(
            "The cluster has no workers, so nothing can train. Start some (ft.cluster("
            "workers=2) for your own cluster) and call fit again."
        )
    world = min(workers, max_workers or workers)
    if spec.aggregator is not None and world < smallest_world(spec.aggregator):
        rule = spec.aggregator
        raise TrainingError(
            f"aggregator={rule.name!r} with f={rule.f} needs {rule.condition}, but "
            f"{world} workers would train. Start more workers, lower f "
            f"(ft_notebook.robust.aggregator({rule.name!r}, f=...)), or choose a rule with "
            f"a weaker condition (median and trimmed-mean need only f < n/2)."
        )
    if batch_size < world:
        raise TrainingError(
            f"batch_size={batch_size} is smaller than the {world} workers that would train: "
            f"every worker needs at least one sample per step. Use batch_size >= {world} "
            f"or max_workers={batch_size}."
        )
    from ft_notebook.train._coordinator import RunCoordinator
    from ft_notebook.train._remote import submit_run

    client.register_plugin(RunCoordinator())
    client.run_on_scheduler(submit_run, name=name, spec=payload, options=options)
    run = Run(client, name, model_factory=model, store_url=spec.store_url, batch_size=batch_size)
    if wait:
        run.wait(timeout=timeout)
    return run


def _given(**arguments: Any) -> dict[str, Any]:
    """The arguments the caller gave: None means "the configured value", which the
    spec and the options fill in themselves."""
    return {k: v for k, v in arguments.items() if v is not None}


class Run:
    """A training run on a cluster, started here or elsewhere (see ``attach``)."""

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        model_factory: Callable[[], Any] | None = None,
        store_url: str | None = None,
        batch_size: int | None = None,
    ) -> None:
        self.client, self.name = client, name
        self._factory, self._store_url = model_factory, store_url
        self._batch_size = batch_size
        self._info: dict[str, Any] = {}

    def info(self) -> dict[str, Any]:
        """The coordinator's record of the run, fresh."""
        from ft_notebook.train._remote import run_info

        self._info = self.client.run_on_scheduler(run_info, name=self.name)
        return self._info

    @property
    def status(self) -> RunState:
        return RunState(self.info()["state"])

    @property
    def step(self) -> int:
        return int(self.info()["step"])

    @property
    def epoch(self) -> int:
        return int(self.info()["epoch"])

    @property
    def world_size(self) -> int:
        return int(self.info()["world_size"])

    @property
    def history(self) -> list[dict[str, Any]]:
        return list(self.info()["history"])

    @property
    def recoveries(self) -> list[dict[str, Any]]:
        return list(self.info()["recoveries"])

    def wait(
        self, timeout: float | None = None, *, poll_s: float = 0.1, progress: bool = True
    ) -> Run:
        """Block until the run ends; raise RunFailed if it failed.

        ``progress`` shows step, epoch, loss, samples/s, ETA, world size and
        recoveries while it waits: a widget in a notebook, a line on a terminal.
        """
        from ft_notebook.train._progress import Progress

        deadline = None if timeout is None else time.monotonic() + timeout
        bar = Progress(self.name, self._batch_size) if progress else None
        try:
            while True:
                info = self.info()
                state = RunState(info["state"])
                if bar is not None:
                    bar.update(info, final=state.finished)
                if state.finished:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"Run {self.name!r} is still {state.value} at step {info['step']} "
                        f"after {timeout:g} s; it goes on. run.wait() again, or run.cancel()."
                    )
                time.sleep(poll_s)
        except KeyboardInterrupt:
            print(
                f"Stopped waiting; run {self.name!r} goes on in the cluster. "
                f"ft.attach({self.name!r}) finds it; run.cancel() stops it.",
                file=sys.stderr,
            )
            raise
        if state is RunState.FAILED:
            raise RunFailed(_failure_message(info))
        return self

    def cancel(self) -> Run:
        from ft_notebook.train._remote import cancel_run

        self._info = self.client.run_on_scheduler(cancel_run, name=self.name)
        return self

    def logs(self) -> dict[str, str]:
        """Each worker's log of this run (live workers), and the traceback of any failure."""
        from ft_notebook.train._rank import rank_logs

        out: dict[str, str] = {}
        by_address = self.client.run(rank_logs, self.name, on_error="return")
        names = {
            a: str(w.get("name", a))
            for a, w in self.client.scheduler_info(n_workers=-1)["workers"].items()
        }
        for address, text in by_address.items():
            if isinstance(text, str) and text:
                out[names.get(address, address)] = text
        for worker, err in self.info()["errors"].items():
            out[worker] = (out.get(worker, "") + "\n" + err["traceback"]).strip()
        return out

    def model(self, factory: Callable[[], Any] | None = None) -> Any:
        """The trained module from the run's newest checkpoint, on this process's device."""
        import torch

        from ft_notebook.store import CheckpointStore

        factory = factory or self._factory
        if factory is None:
            raise TrainingError(
                f"Run {self.name!r} was attached, so the model's factory is not known here: "
                f"call run.model(factory) with the factory given to fit."
            )
        module = factory()
        url = self._store_url or _store_location(None)[0]
        try:
            with CheckpointStore(url, keep=None, publish_events=False) as store:
                state = store.load(self.name).state
        except StoreError as e:  # no checkpoint there (an unwritable store): ask rank 0
            state = self._final_state_from_workers(e)
        module.load_state_dict(state["model"])
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        return module.to(device)

    def dashboard(self, *, max_rate: float = 4.0) -> Any:
        """A live dashboard of this run (ipywidgets; HTML or text elsewhere)."""
        from ft_notebook.widgets import dashboard

        return dashboard(self, client=self.client, max_rate=max_rate)

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(repr(self))}</pre>"

    def _final_state_from_workers(self, why: Exception) -> dict[str, Any]:
        """The state rank 0 kept in memory at the end of the run, if its worker lives."""
        import io

        import torch

        from ft_notebook.train._rank import final_state

        for data in self.client.run(final_state, self.name, on_error="return").values():
            if isinstance(data, bytes):
                # weights_only: tensors and plain values, never code
                return dict(torch.load(io.BytesIO(data), map_location="cpu", weights_only=True))
        raise TrainingError(
            f"Run {self.name!r} has no checkpoint to load ({why}), and no worker holds its "
            f"final state (it is unfinished, or the worker that trained rank 0 is gone)."
        ) from why

    def __repr__(self) -> str:
        info = self._info or {}
        if not info:
            try:
                info = self.info()
            except Exception:
                return f"<Run {self.name!r}>"
        return format_run(info)


def format_run(info: dict[str, Any]) -> str:
    total = info.get("total_steps") or "?"
    line = (
        f"Run {info['name']!r}: {info['state']} ({info['health']}), step {info['step']}/{total}, "
        f"epoch {info['epoch']}, {info['world_size']} workers, loss {info.get('loss')}"
    )
    for r in info.get("recoveries", []):
        line += (
            f"\n  recovery: {r['cause']}; RTO {r['rto_s']:.3f} s, {r['steps_lost']} steps lost, "
            f"workers {r['workers_before']} -> {r['workers_after']} ({r['how']})"
        )
    return line


def _failure_message(info: dict[str, Any]) -> str:
    lines = [f"Run {info['name']!r} failed at step {info['step']}: {info.get('reason', '')}."]
    for worker, err in info.get("errors", {}).items():
        tb = err.get("traceback", "").strip().splitlines()
        lines.append(f"On worker {worker}: {err.get('error')}")
        lines += ["    " + t for t in tb[-12:]]
    lines.append("The cluster is still usable: fix the cause and call fit again.")
    return "\n".join(lines)


def runs(cluster: Any = None) -> list[Run]:
    """The runs the cluster's coordinator knows (active and finished), oldest first."""
    from ft_notebook.train._remote import list_runs

    client = client_for(cluster)
    return [Run(client, name) for name in client.run_on_scheduler(list_runs)]


def attach(name: str, cluster: Any = None) -> Run:
    """A handle on the run ``name`` (started by any process) on your cluster."""
    run = Run(client_for(cluster), checked_name(name, "run name"))
    run.info()  # raises when there is no such run
    return run


def _store_location(store: Any) -> tuple[str, int | None]:
    """The URL of fit's ``store=``, and how many checkpoints of a run it keeps: a
    CheckpointStore's own ``keep``, else ``ft-notebook.train.store-keep``."""
    from ft_notebook.config import get_config

    keep = get_config().train.store_keep
    if store is None:
        return str(data_dir() / "checkpoints"), keep
    if isinstance(store, str):
        return store, keep
    url = getattr(store, "url", None)
    if url is None:
        raise TrainingError(f"store= takes a CheckpointStore or a URL, got {type(store).__name__}.")
    return str(url), getattr(store, "keep", keep)
