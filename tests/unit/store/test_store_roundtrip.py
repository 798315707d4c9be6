"""What is saved is what is loaded: every supported kind of value, bit for bit."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

from ft_notebook.events import history
from ft_notebook.exceptions import CheckpointNotFound
from ft_notebook.store import Checkpoint, CheckpointInfo, CheckpointStore

Same = Callable[[Any, Any], None]


def test_nested_state_round_trips(
    store: CheckpointStore, make_state: Callable[..., dict[str, Any]], same: Same
) -> None:
    state = make_state(1)
    expected = copy.deepcopy(state)
    info = store.save("run-a", 7, state, {"epoch": 2, "cursor": (3, 1024)})
    assert isinstance(info, CheckpointInfo)
    assert (info.run, info.step, info.metadata) == ("run-a", 7, {"epoch": 2, "cursor": (3, 1024)})

    loaded = store.load("run-a")
    assert isinstance(loaded, Checkpoint)
    assert (loaded.step, loaded.metadata, loaded.location) == (7, info.metadata, store.url)
    same(expected, loaded.state)
    same(expected, store.load("run-a", 7).state)


def test_model_and_optimizer_resume_exactly(store: CheckpointStore) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 8), torch.randn(32, 1)

    def step(m: torch.nn.Module, o: torch.optim.Optimizer) -> None:
        o.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        o.step()

    for _ in range(3):
        step(model, opt)
    store.save("train", 3, {"model": model.state_dict(), "optim": opt.state_dict()})
    step(model, opt)

    ck = store.load("train")
    model2 = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt2 = torch.optim.AdamW(model2.parameters(), lr=0.01)
    model2.load_state_dict(ck.state["model"])
    opt2.load_state_dict(ck.state["optim"])
    step(model2, opt2)
    for p, q in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(p, q)


def test_files_are_standard_safetensors(url: str, store: CheckpointStore, files: Any) -> None:
    t = torch.arange(400_000, dtype=torch.float32)
    store.save("r", 1, {"t": t, "small": torch.ones(3, dtype=torch.bfloat16), "a": np.arange(5)})
    tensor_files = [p for p in files.files_of("r", 1) if p.endswith(".safetensors")]
    loaded = [safetensors.torch.load(files.read(p)) for p in tensor_files]
    flat = [v for d in loaded for v in d.values()]
    assert any(torch.equal(v, t) for v in flat)
    assert any(
        v.dtype == torch.bfloat16 and torch.equal(v, torch.ones(3, dtype=torch.bfloat16))
        for v in flat
    )
    assert any(torch.equal(v, torch.arange(5)) for v in flat)  # the NumPy array
    store.save("np", 1, {"a": np.arange(5, dtype=np.int16)})
    (pack,) = [p for p in files.files_of("np", 1) if p.endswith(".safetensors")]
    assert np.array_equal(
        safetensors.numpy.load(files.read(pack))["0"], np.arange(5, dtype=np.int16)
    )


def test_equal_tensors_do_not_alias_after_load(store: CheckpointStore) -> None:
    """Two zero-initialised Adam moments are one blob; loaded, they must be two tensors."""
    state = {
        "m": torch.zeros(300_000),
        "v": torch.zeros(300_000),
        "a": np.zeros(10),
        "b": np.zeros(10),
    }
    store.save("r", 1, state)
    ck = store.load("r")
    ck.state["m"].add_(1)
    ck.state["a"] += 1
    assert float(ck.state["v"].abs().sum()) == 0.0
    assert float(np.abs(ck.state["b"]).sum()) == 0.0


def test_loaded_tensors_outlive_the_store_buffers(store: CheckpointStore) -> None:
    import gc

    store.save("r", 1, {"t": torch.arange(300_000, dtype=torch.float64)})
    t = store.load("r").state["t"]
    gc.collect()
    assert torch.equal(t, torch.arange(300_000, dtype=torch.float64))
    t.mul_(2)  # writable, in place, as an optimizer does
    assert float(t[-1]) == 2 * 299_999


def test_tensor_views_grads_and_conj_are_saved_as_values(store: CheckpointStore) -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    param = torch.nn.Parameter(torch.ones(3))
    state = {
        "transposed": base.t(),
        "slice": base[1:3, ::2],
        "param": param,
        "conj": torch.tensor([1 + 2j], dtype=torch.complex64).conj(),
        "neg": torch.tensor([1 + 2j], dtype=torch.complex64).conj().imag,
    }
    store.save("r", 1, state)
    out = store.load("r").state
    assert torch.equal(out["transposed"], base.t().contiguous())
    assert torch.equal(out["slice"], base[1:3, ::2].contiguous())
    assert type(out["param"]) is torch.Tensor
    assert not out["param"].requires_grad
    assert torch.equal(out["conj"], torch.tensor([1 - 2j], dtype=torch.complex64))
    assert torch.equal(out["neg"], torch.tensor([-2.0]))


def test_numpy_only_state_keeps_its_types(store: CheckpointStore, same: Same) -> None:
    state = {
        "x": np.linspace(0, 1, 11),
        "n": np.int16(3),
        "flag": np.bool_(True),
        "f16": np.float16(0.5),
    }
    store.save("np", 0, state)
    same(state, store.load("np").state)


def test_list_latest_and_verify_describe_committed_checkpoints(store: CheckpointStore) -> None:
    assert store.list("r") == []
    assert store.latest("r") is None
    for step in (5, 10, 20):
        store.save("r", step, {"x": torch.full((3,), float(step))}, {"step": step})
    assert [i.step for i in store.list("r")] == [5, 10, 20]
    latest = store.latest("r")
    assert latest is not None
    assert latest.step == 20
    assert latest.metadata == {"step": 20}
    assert store.verify("r", 10).step == 10
    assert store.runs() == ["r"]


def test_commit_publishes_an_event(store: CheckpointStore, unique_name: str) -> None:
    info = store.save(unique_name, 4, {"x": torch.ones(2)})
    events = [e for e in history(run=unique_name) if e.kind == "checkpoint-committed"]
    assert [(e.data["checkpoint_step"], e.data["nbytes"], e.data["location"]) for e in events] == [
        (4, info.nbytes, store.url)
    ]


def test_deleted_checkpoint_is_gone(store: CheckpointStore) -> None:
    store.save("r", 1, {"x": torch.ones(2)})
    store.save("r", 2, {"x": torch.zeros(2)})
    store.delete("r", 2)
    assert [i.step for i in store.list("r")] == [1]
    assert store.load("r").step == 1
    with pytest.raises(CheckpointNotFound, match="step 2"):
        store.load("r", 2)
    with pytest.raises(CheckpointNotFound):
        store.delete("r", 2)


def test_file_url_is_a_local_folder(tmp_path: Any) -> None:
    with CheckpointStore(f"file://{tmp_path}/s") as s:
        s.save("r", 1, {"x": torch.ones(2)})
    assert (tmp_path / "s" / "r" / "000000000001" / "manifest.json").is_file()
