"""The notebook's side of a run: ``fit`` checks what it is given and starts the run.

It reads the settings once into a :class:`~ft_notebook.train.spec.FitSpec`, refuses what cannot work
(a resume with other data settings, a rule too strict for the cluster), submits the
run to the coordinator in the scheduler and returns a :class:`~._handle.Run` handle
that follows it (:mod:`._handle`).
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ft_notebook._paths import checked_name, private_dir
from ft_notebook.cluster import client_for
from ft_notebook.exceptions import NoWorkers, TrainingError
from ft_notebook.train._earlier import refuse_another_order, refuse_old_checkpoints
from ft_notebook.train._robust import rule_of, smallest_world
from ft_notebook.train._schedule import FIRST_AUTO_STEP
from ft_notebook.train.kernel._calls import ask
from ft_notebook.train.kernel._handle import Run, default_store_url
from ft_notebook.train.kernel._mtbf import planning_mtbf
from ft_notebook.train.protocol import RunAction
from ft_notebook.train.spec import FitSpec, RunOptions, dumps_spec


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
    do the run's other settings (timeouts, hang detection, ordered sums, how many
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
    name = checked_name(
        name or f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}", "run name"
    )
    _check_call(wait, timeout)
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
    options = RunOptions(
        max_workers=max_workers,
        total_steps=-(-size // batch_size) * epochs if size else 0,
        **_given(min_workers=min_workers, fast_recovery=fast_recovery),
    )
    if spec.aggregator is not None and spec.on_violation == "stall":
        # too few workers for the rule: the run stalls, as below min_workers
        options.min_workers = max(options.min_workers, smallest_world(spec.aggregator))
    options.validate()
    probe_store(spec.store_url)
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
    _install_plugins(client)
    submitted = ask(client, RunAction.SUBMIT, name=name, spec=payload, options=options.to_wire())
    run = Run(client, name, model_factory=model, store_url=spec.store_url, info=submitted)
    if wait:
        run.wait(timeout=timeout)
    return run


#: Attempts to install the plugins when the connection to the scheduler closes.
_PLUGIN_TRIES = 3


def _install_plugins(client: Any) -> None:
    """Hand the coordinator and the ranks' handlers to Dask (once per cluster: both are
    idempotent). The one place the kernel names their code, which it never calls."""
    from distributed.comm.core import CommClosedError

    from ft_notebook.train.coordinator import RunCoordinator
    from ft_notebook.train.rank import RankHandlers

    for attempt in range(1, _PLUGIN_TRIES + 1):
        try:
            client.register_plugin(RankHandlers())
            client.register_plugin(RunCoordinator())
            return
        except Exception as e:
            # a pooled connection to the scheduler that closed on a loaded machine (a
            # fresh clone's make test saw one in demo 02): both plugins are idempotent,
            # so asking again, on a new connection, is safe
            if isinstance(e, CommClosedError):
                if attempt < _PLUGIN_TRIES:
                    continue
                raise TrainingError(
                    f"The connection to the scheduler at "
                    f"{getattr(client.scheduler, 'address', '?')} closed {_PLUGIN_TRIES} "
                    f"times in a row while training's plugins were installed: {e}. Check "
                    f"that the cluster is up (`%ft cluster status`, or its dashboard) and "
                    f"call fit again."
                ) from e
            raise TrainingError(
                f"Could not install training's plugins on the cluster at "
                f"{getattr(client.scheduler, 'address', '?')}: {type(e).__name__}: {e}. Its "
                f"scheduler and workers need ft_notebook installed (the same version as "
                f"here)."
            ) from e


def _check_call(wait: object, timeout: object) -> None:
    """fit's own arguments, the ones that never reach the spec."""
    if type(wait) is not bool:
        raise TrainingError(f"wait= must be True or False, got {wait!r:.80}.")
    if timeout is not None and not (
        isinstance(timeout, (int, float))
        and not isinstance(timeout, bool)
        and math.isfinite(timeout)
        and timeout > 0
    ):
        raise TrainingError(
            f"timeout= must be a positive number of seconds (or None: no limit), got "
            f"{timeout!r:.80}."
        )


def probe_store(url: str) -> None:
    """Refuse a local ``store=`` this kernel cannot write to, before the run starts:
    create, write, sync and remove a probe file in its folder. Otherwise the ranks'
    saves fail one after another while the run trains on without checkpoints.

    Other URLs (``memory://`` is each process's own memory; object stores may hold
    credentials only the workers have) are left to the ranks."""
    folder = _local_folder(url)
    if folder is None:
        return
    probe = folder / f".ft-probe-{uuid.uuid4().hex}"  # unique: concurrent fits never meet
    try:
        if not folder.exists():
            private_dir(folder)  # as the store would make it on its first save
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"ft_notebook probe\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise TrainingError(
            f"store={url!r} cannot hold this run's checkpoints: writing a probe file "
            f"{e.filename or probe} failed with [Errno {e.errno}] {e.strerror}. Nothing was "
            f"started. Pass store= a folder you can write to, or leave store= out for your "
            f"private folder {default_store_url()}."
        ) from e


def _local_folder(url: str) -> Path | None:
    if url.startswith("file://"):
        return Path(url.removeprefix("file://")).expanduser().absolute()
    if "://" in url or "::" in url:
        return None
    return Path(url).expanduser().absolute()


def _given(**arguments: Any) -> dict[str, Any]:
    """The arguments the caller gave: None means "the configured value", which the
    spec and the options fill in themselves."""
    return {k: v for k, v in arguments.items() if v is not None}


def _store_location(store: Any) -> tuple[str, int | None]:
    """The URL of fit's ``store=``, and how many checkpoints of a run it keeps: a
    CheckpointStore's own ``keep``, else ``ft-notebook.train.store-keep``."""
    from ft_notebook.config import get_config

    keep = get_config().train.store_keep
    if store is None:
        return default_store_url(), keep
    if isinstance(store, str):
        return store, keep
    url = getattr(store, "url", None)
    if url is None:
        raise TrainingError(f"store= takes a CheckpointStore or a URL, got {type(store).__name__}.")
    return str(url), getattr(store, "keep", keep)
