"""Every bad input refused before it runs, with the culprit named (issue 36, items 4-8).

``ft.fit``'s arguments and its store are checked in the kernel, before anything is
submitted (a recording client stands in for the cluster: what it is handed is what
the coordinator would get); a checkpoint another user could have written is loaded
only on an explicit opt-in; the predict route's reply has a JSON form for any
output. The magics' cases run in a real kernel (tests/integration/test_bad_input_kernel.py)
and the HTTP ones through a real server (tests/integration/test_server_bad_input.py).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from ft_notebook.exceptions import StoreUnsafe, TrainingError
from ft_notebook.store import CheckpointStore
from ft_notebook.testing.training import counting_problem
from ft_notebook.train.kernel import _fit as _run
from ft_notebook.train.kernel import fit

#: A uid no test process runs as (CI runs as root, which may chown to it).
OTHER_UID = 65534
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="chown to another uid needs root")


class RecordingClient:
    """Enough of a distributed.Client for fit: two workers; records what it is handed."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def scheduler_info(self, n_workers: int = 5) -> dict[str, Any]:
        self.calls.append("scheduler_info")
        return {"workers": {"tcp://a": {}, "tcp://b": {}}}

    def register_plugin(self, plugin: Any) -> None:
        self.calls.append("register_plugin")

    @property
    def scheduler(self) -> Any:
        return self

    def ft_train(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("submit")
        return {"name": kwargs["name"], "incarnation": "recorded"}

    def sync(self, handler: Any, **kwargs: Any) -> Any:
        return handler(**kwargs)


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> RecordingClient:
    recording = RecordingClient()
    monkeypatch.setattr(_run, "client_for", lambda cluster: recording)
    return recording


def _problem(**changes: Any) -> dict[str, Any]:
    return {**counting_problem(), "store": "memory://bad-input", "wait": False, **changes}


FIT_CASES = [
    ({"data": None}, r"data= must be a map-style dataset .* got NoneType None"),
    ({"data": 42}, r"data= must be a map-style dataset .* got int 42"),
    ({"data": []}, r"data= is empty"),
    ({"loss": "mse"}, r"loss= must be a function .* got str 'mse'"),
    ({"train_step": 3}, r"train_step= must be a function"),
    ({"lr_scheduler": "cosine"}, r"lr_scheduler= must be a function"),
    ({"eval_fn": "accuracy"}, r"eval_fn= must be a function"),
    ({"seed": "x"}, r"seed= must be an int .* got str 'x'"),
    ({"seed": -1}, r"seed= must be an int from 0"),
    ({"seed": 1.5}, r"seed= must be an int"),
    ({"eval_every": "10"}, r"eval_every= must be an int >= 0"),
    ({"eval_every": 5}, r"eval_every=5 needs eval_fn="),
    ({"clip_grad_norm": "1.0"}, r"clip_grad_norm= must be a positive finite number"),
    ({"clip_grad_norm": math.nan}, r"clip_grad_norm= must be a positive finite number"),
    ({"deterministic": "yes"}, r"deterministic= must be True or False"),
    ({"resume": 1}, r"resume= must be True or False"),
    ({"wait": "no"}, r"wait= must be True or False"),
    ({"timeout": -5}, r"timeout= must be a positive number of seconds"),
    ({"timeout": "10s"}, r"timeout= must be a positive number of seconds"),
    ({"max_workers": 0}, r"max_workers= must be a positive int"),
    ({"max_workers": "2"}, r"max_workers= must be a positive int"),
]


@pytest.mark.parametrize(("changes", "message"), FIT_CASES, ids=[repr(c) for c, _ in FIT_CASES])
def test_fit_names_the_bad_argument_before_anything_is_submitted(
    client: RecordingClient, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(TrainingError, match=message):
        fit(**_problem(**changes))
    assert "submit" not in client.calls
    assert "register_plugin" not in client.calls


@pytest.mark.parametrize(
    "store",
    ["/proc/nope", "/proc/nope/deeper", "file:///proc/nope", "{file}/under-a-file"],
)
def test_fit_refuses_a_store_it_cannot_write_before_the_run_starts(
    client: RecordingClient, tmp_path: Path, store: str
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("not a folder")
    store = store.format(file=a_file)
    with pytest.raises(TrainingError, match=r"store=.* cannot hold this run's checkpoints") as e:
        fit(**_problem(store=store))
    message = str(e.value)
    assert store in message
    assert "[Errno" in message
    assert "Pass store= a folder you can write to" in message
    assert "submit" not in client.calls


def test_fit_leaves_nothing_behind_in_a_store_it_probed(
    client: RecordingClient, tmp_path: Path
) -> None:
    store = tmp_path / "new" / "checkpoints"
    fit(**_problem(store=str(store)))
    assert "submit" in client.calls
    assert store.is_dir()
    assert list(store.iterdir()) == []
    assert store.stat().st_mode & 0o777 == 0o700


# -- a checkpoint another user could have written (item 8) --------------------------


def _save(store: CheckpointStore, step: int, value: float, raw: bool) -> None:
    if raw:  # as notebook snapshots are kept: plain values, read back with open_raw
        store.save_raw("r", step, {"w": value}, {})
    else:
        store.save("r", step, {"w": torch.full((3,), value)})


def _plant(shared: Path, how: str, raw: bool) -> Path:
    """Another user's checkpoint of alice's run at a higher step (tensors and plain
    values only: nothing is unpickled): saved, then handed to that user as if they
    had written it, or left writable to all."""
    with CheckpointStore(shared, keep=None, publish_events=False) as other:
        _save(other, 9, -1.0, raw)
    step = shared / "r" / f"{9:012d}"
    if how == "owned by another uid":
        for path in (step, step / "manifest.json"):
            os.chown(path, OTHER_UID, OTHER_UID)
        return step
    os.chmod(step / "manifest.json", 0o666)
    return step / "manifest.json"


@needs_root
@pytest.mark.parametrize("reader", ["load", "open_raw"])
@pytest.mark.parametrize("how", ["owned by another uid", "writable by all"])
def test_a_checkpoint_another_user_could_have_written_is_not_loaded_silently(
    tmp_path: Path, how: str, reader: str
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # a team folder anyone may write to
    raw = reader == "open_raw"
    store = CheckpointStore(shared, keep=None, publish_events=False)
    _save(store, 1, 1.0, raw)  # alice's own
    planted = _plant(shared, how, raw)
    why = f"uid {OTHER_UID}" if how == "owned by another uid" else "lets other users write"

    def newest(store: CheckpointStore, step: int | None = None) -> tuple[int, Any]:
        if raw:
            found = store.open_raw("r", step)
            return found.info.step, found.state["w"]
        loaded = store.load("r", step)
        return loaded.step, float(loaded.state["w"][0])

    with pytest.raises(StoreUnsafe, match=rf"step 9 of run 'r' at {planted}: .*{why}") as e:
        newest(store)
    assert "trust=True" in str(e.value)
    # the opt-in: the user says they trust whoever can write there
    trusted = CheckpointStore(shared, keep=None, publish_events=False, trust=True)
    assert newest(trusted) == (9, -1.0)
    # their own step, named, needs no opt-in
    assert newest(store, 1) == (1, 1.0)


def test_a_private_checkpoint_loads_without_an_opt_in(tmp_path: Path) -> None:
    with CheckpointStore(tmp_path / "mine", keep=None, publish_events=False) as store:
        store.save("r", 4, {"w": torch.ones(2)})
        store.save_raw("nb", 5, {"x": 1}, {})
        assert store.load("r").step == 4
        assert store.open_raw("nb").info.step == 5


# -- what the predict route answers with (item 6) ------------------------------------


@pytest.mark.parametrize(
    "output",
    [
        torch.tensor([1.0, math.nan, math.inf, -math.inf]),
        [1.0, math.nan, {"a": math.inf}],
        math.nan,
    ],
)
def test_a_models_non_finite_output_has_a_json_form(output: Any) -> None:
    from ft_notebook.server._services import _json

    text = json.dumps(_json(output), allow_nan=False)  # what the route replies with
    assert "null" in text


# -- %ft list (issue 38) --------------------------------------------------------------


def test_list_shows_each_snapshot_name_once_the_one_restore_brings_back(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A new ``latest`` is committed before the one before it is pruned (and an auto
    snapshot commits in the background meanwhile): the session's list can hold two."""
    from ft_notebook.magics import _render

    def row(name: str, t: float, variables: list[str]) -> dict[str, Any]:
        return {"name": name, "time": t, "cell": 1, "size": 5, "variables": variables}

    _render.listing(
        [row("latest", 1.0, ["a"]), row("t", 2.0, ["a", "b"]), row("latest", 3.0, ["a", "b", "c"])]
    )
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["t", "latest"], rows
    assert rows[1].endswith("a, b, c"), rows
