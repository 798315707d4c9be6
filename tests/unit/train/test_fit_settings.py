"""``ft.fit``'s settings: left out, they come from ``ft-notebook.train``, read once in
the kernel; given, they are checked before anything reaches the cluster.

fit talks to the cluster through its client only, so a recording client stands in
for one here (the transport seam): what it is handed is what the coordinator gets.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from collections.abc import Iterator
from typing import Any

import dask.config
import pytest

from ft_notebook.config import get_config, reload_config
from ft_notebook.exceptions import TrainingError
from ft_notebook.testing.training import counting_problem
from ft_notebook.train.kernel import _fit as _run
from ft_notebook.train.kernel import fit
from ft_notebook.train.spec import FitSpec, RunOptions

#: fit's arguments that are settings: None takes the one of that name in the config.
SETTINGS = ("checkpoint_every", "min_workers", "fast_recovery", "nonfinite_limit", "device", "amp")


class RecordingClient:
    """Enough of a distributed.Client for fit: two workers, and a scheduler that
    records the run it is asked to start."""

    def __init__(self) -> None:
        self.submitted: dict[str, Any] = {}

    def scheduler_info(self, n_workers: int = 5) -> dict[str, Any]:
        return {"workers": {"tcp://a": {}, "tcp://b": {}}}

    def register_plugin(self, plugin: Any) -> None:
        pass

    @property
    def scheduler(self) -> Any:
        return self  # its handler ft_train is the method below

    def ft_train(self, **kwargs: Any) -> dict[str, Any]:
        self.submitted = kwargs
        return {"name": kwargs["name"], "incarnation": "recorded"}  # the record, in short

    def sync(self, handler: Any, **kwargs: Any) -> Any:
        return handler(**kwargs)


@pytest.fixture(autouse=True)
def _fresh_config() -> Iterator[None]:
    yield
    reload_config()


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> RecordingClient:
    recording = RecordingClient()
    monkeypatch.setattr(_run, "client_for", lambda cluster: recording)
    return recording


def _fit(client: RecordingClient, batch: int = 32, **kw: Any) -> tuple[FitSpec, RunOptions]:
    fit(**counting_problem(batch=batch), store="memory://fit-settings", wait=False, **kw)
    spec = pickle.loads(client.submitted["spec"])  # cloudpickle writes plain pickles
    assert client.submitted["action"] == "submit"
    return spec, RunOptions.from_wire(client.submitted["options"])


def test_fit_takes_every_setting_left_out_from_the_config(client: RecordingClient) -> None:
    settings = {
        "ft-notebook.train.checkpoint-every": 7,
        "ft-notebook.train.store-keep": None,
        "ft-notebook.train.min-workers": 2,
        "ft-notebook.train.fast-recovery": False,
        "ft-notebook.train.nonfinite-limit": 5,
        "ft-notebook.train.device": "cpu",
        "ft-notebook.train.amp": True,
        "ft-notebook.train.rendezvous-timeout": "45s",
        "ft-notebook.train.collective-timeout": "20 minutes",
        "ft-notebook.train.survivor-groups-max-world": 4,
        "ft-notebook.train.warmup-timeout": "2 minutes",
        "ft-notebook.train.deterministic-chunks": 2,
        "ft-notebook.train.ordered-sums": False,
        "ft-notebook.train.stall-min": "20s",
    }
    with dask.config.set(settings):
        reload_config()
        spec, options = _fit(client, batch=8, deterministic=True)
    expected = {
        "checkpoint_every": 7,
        "store_keep": None,
        "nonfinite_limit": 5,
        "device": "cpu",
        "amp": True,
        "rendezvous_timeout_s": 45.0,
        "collective_timeout_s": 1200.0,
        "survivor_groups_max_world": 4,
        "deterministic_chunks": 2,
        "ordered_sums": False,
    }
    assert {k: getattr(spec, k) for k in expected} == expected
    assert spec.chunk == 4  # batch_size 8 in 2 chunks
    assert (options.min_workers, options.fast_recovery) == (2, False)
    assert (options.warmup_timeout_s, options.stall_min_s) == (120.0, 20.0)


def test_arguments_given_win_over_the_config(client: RecordingClient) -> None:
    given = {"checkpoint_every": 3, "nonfinite_limit": 1, "device": "cpu", "amp": True}
    spec, options = _fit(client, min_workers=2, fast_recovery=False, **given)
    assert {k: getattr(spec, k) for k in given} == given
    assert (options.min_workers, options.fast_recovery) == (2, False)


def test_the_spec_keeps_its_values_wherever_it_is_unpickled(client: RecordingClient) -> None:
    """A worker unpickles the spec: its own configuration must play no part."""
    spec, _ = _fit(client)
    payload = client.submitted["spec"]
    with dask.config.set({"ft-notebook.train.checkpoint-every": 999}):
        reload_config()
        assert pickle.loads(payload).checkpoint_every == spec.checkpoint_every == 50


def test_specs_built_directly_take_the_config_too() -> None:
    """Tests and tools that build a FitSpec or RunOptions themselves get the same values
    fit would: the defaults are not written twice."""
    train = get_config().train
    spec, options = FitSpec(**counting_problem(), epochs=1), RunOptions()
    for f in dataclasses.fields(train):
        holder = spec if hasattr(spec, f.name) else options
        assert getattr(holder, f.name) == getattr(train, f.name), f.name


def test_fit_keeps_its_signature_and_defaults_its_settings_to_none() -> None:
    parameters = inspect.signature(fit).parameters
    assert list(parameters)[:4] == ["model", "data", "optimizer", "loss"]
    keyword_only = [n for n, p in parameters.items() if p.kind is p.KEYWORD_ONLY]
    assert keyword_only == list(parameters)[4:]
    fields = {f.name for f in dataclasses.fields(type(get_config().train))}
    for name in SETTINGS:
        assert parameters[name].default is None, name
        assert name in fields, name
    assert (parameters["epochs"].default, parameters["batch_size"].default) == (1, 32)
    assert "ft-notebook.train" in (fit.__doc__ or "")


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("nonfinite_limit", 0, "nonfinite_limit must be a positive int"),
        ("checkpoint_every", 0, "checkpoint_every must be a positive int"),
        ("min_workers", 0, "min_workers must be a positive int"),
        ("device", "tpu", "device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>'"),
        ("amp", "yes", "amp must be True or False"),
        ("fast_recovery", 1, "fast_recovery must be True or False"),
    ],
)
def test_bad_settings_are_refused_before_the_cluster_is_asked(
    monkeypatch: pytest.MonkeyPatch, argument: str, value: Any, message: str
) -> None:
    def no_cluster(cluster: Any) -> None:
        raise AssertionError("fit reached the cluster with a bad argument")

    monkeypatch.setattr(_run, "client_for", no_cluster)
    with pytest.raises(TrainingError, match=message):
        fit(**counting_problem(), store="memory://fit-settings", **{argument: value})


def test_a_checkpoint_store_given_keeps_its_own_keep() -> None:
    class Store:
        url, keep = "memory://kept", None

    assert _run._store_location(Store()) == ("memory://kept", None)
    assert _run._store_location("memory://x") == ("memory://x", get_config().train.store_keep)
