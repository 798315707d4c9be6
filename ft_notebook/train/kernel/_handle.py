"""A :class:`Run`: the handle a kernel holds on a training run.

The run itself is driven by the coordinator in the scheduler and the rank actors in
the workers, so it goes on when this kernel dies; :func:`attach` and :func:`runs`
find it again from a new one. The handle asks the coordinator (its record, through
its handler), follows the run's events while it waits (:mod:`._follow`), and for the
final model reads the newest checkpoint or a worker's state.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from ft_notebook._paths import checked_name, data_dir
from ft_notebook.cluster import client_for
from ft_notebook.events import RunState
from ft_notebook.exceptions import RunFailed, StoreError, TrainingError
from ft_notebook.train.kernel._calls import NoCoordinator, ask, ask_every_worker
from ft_notebook.train.protocol import RankOp, RunAction


class Run:
    """A training run on a cluster, started here or elsewhere (see ``attach``)."""

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        model_factory: Callable[[], Any] | None = None,
        store_url: str | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        self.client, self.name = client, name
        self._factory, self._store_url = model_factory, store_url
        self._info: dict[str, Any] = dict(info or {})  # the newest record read

    def info(self) -> dict[str, Any]:
        """The coordinator's record of the run, fresh."""
        self._info = dict(ask(self.client, RunAction.INFO, name=self.name))
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

    def wait(self, timeout: float | None = None, *, progress: bool = True) -> Run:
        """Block until the run ends; raise RunFailed if it failed.

        ``progress`` shows step, epoch, loss, samples/s, ETA, world size and
        recoveries while it waits: a widget in a notebook, a line on a terminal. It
        follows the run's events (see :mod:`._follow`), not its whole record.
        """
        from ft_notebook.train.kernel._follow import CHECK_S, LAST_EVENTS_S, RunFollower
        from ft_notebook.train.kernel._progress import Progress

        deadline = None if timeout is None else time.monotonic() + timeout
        bar = Progress(self.name) if progress else None
        follower = None
        next_check, ended_at = time.monotonic(), None  # when the coordinator said it ended
        try:
            incarnation = self._info.get("incarnation") or self.info()["incarnation"]
            follower = RunFollower(self.name, self.client, str(incarnation))
            while not follower.ended:
                view = follower.view
                if bar is not None:
                    bar.update(view)
                now = time.monotonic()
                if ended_at is None and now >= next_check:
                    next_check = now + CHECK_S
                    state = RunState(ask(self.client, RunAction.STATE, name=self.name))
                    ended_at = now if state.finished else None
                if ended_at is not None and now - ended_at > LAST_EVENTS_S:
                    break  # its events do not reach this kernel (no journal here)
                if deadline is not None and now > deadline:
                    raise TimeoutError(
                        f"Run {self.name!r} is still {_state(view)} at step {view.step or 0} "
                        f"after {timeout:g} s; it goes on. run.wait() again, or run.cancel()."
                    )
                left = 0.25 if deadline is None else max(0.0, min(0.25, deadline - now))
                follower.wait_for_change(left)
        except KeyboardInterrupt:
            print(
                f"Stopped waiting; run {self.name!r} goes on in the cluster. "
                f"ft.attach({self.name!r}) finds it; run.cancel() stops it.",
                file=sys.stderr,
            )
            raise
        finally:
            if follower is not None:
                follower.close()
        if bar is not None:
            bar.update(follower.view, final=True)
        info = self.info()  # once: the errors of a failure, and the handle's repr
        if info["state"] == RunState.FAILED.value:
            raise RunFailed(_failure_message(info))
        return self

    def cancel(self) -> Run:
        self._info = dict(ask(self.client, RunAction.CANCEL, name=self.name))
        return self

    def logs(self) -> dict[str, str]:
        """Each worker's log of this run (live workers), and the traceback of any failure."""
        out: dict[str, str] = {}
        by_address = ask_every_worker(self.client, RankOp.LOGS, run=self.name)
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
        url = self._store_url or default_store_url()
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

        for data in ask_every_worker(self.client, RankOp.FINAL_STATE, run=self.name).values():
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


def _state(view: Any) -> str:
    return view.state.value if view.state is not None else "starting"


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
    client = client_for(cluster)
    try:
        names = ask(client, RunAction.NAMES)
    except NoCoordinator:  # fit never ran on this cluster: no run either
        return []
    return [Run(client, name) for name in names]


def attach(name: str, cluster: Any = None) -> Run:
    """A handle on the run ``name`` (started by any process) on your cluster."""
    run = Run(client_for(cluster), checked_name(name, "run name"))
    run.info()  # raises when there is no such run
    return run


def default_store_url() -> str:
    """Where a run's checkpoints go when ``fit`` is given no ``store=``."""
    return str(data_dir() / "checkpoints")
