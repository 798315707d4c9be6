"""Bad input and failing storage: the right error, a message to act on, nothing damaged."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from fsspec.implementations.memory import MemoryFileSystem

from ft_notebook.exceptions import CheckpointNotFound, StoreError, UnsafeName
from ft_notebook.store import CheckpointStore


@contextlib.contextmanager
def failing_writes(
    monkeypatch: pytest.MonkeyPatch, url: str, where: str, code: int = errno.ENOSPC
) -> Iterator[None]:
    """Make writes of blob data ("data"), of the manifest ("manifest") or the fsync of
    a blob ("fsync", local only) fail with ``code``, as a full or broken disk does."""
    part = "manifest.json" if where == "manifest" else "/blobs/"

    def fail() -> None:
        raise OSError(code, os.strerror(code))

    with monkeypatch.context() as m:
        if url.startswith("memory://"):
            pipe = MemoryFileSystem.pipe_file

            def pipe_file(
                self: MemoryFileSystem, path: str, value: bytes, *a: Any, **kw: Any
            ) -> None:
                if part in path:
                    fail()
                pipe(self, path, value, *a, **kw)

            m.setattr(MemoryFileSystem, "pipe_file", pipe_file)
        else:
            real = os.fsync if where == "fsync" else os.write

            def call(fd: int, *args: Any) -> Any:
                if part in os.readlink(f"/proc/self/fd/{fd}"):
                    fail()
                return real(fd, *args)

            m.setattr(os, "fsync" if where == "fsync" else "write", call)
        yield


@pytest.mark.parametrize("where", ["data", "manifest", "fsync"])
def test_a_full_disk_keeps_the_previous_checkpoint(
    url: str, files: Any, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if where == "fsync" and url.startswith("memory://"):
        pytest.skip("memory:// has no fsync")
    store = CheckpointStore(url, publish_events=False)
    store.save("r", 1, {"w": torch.ones(300_000), "step": 1})
    before = {p: files.read(p) for p in files.files_of("r", 1)}

    with failing_writes(monkeypatch, url, where), pytest.raises(StoreError) as caught:
        store.save("r", 2, {"w": torch.zeros(300_000), "step": 2})

    message = str(caught.value)
    assert "[Errno 28] No space left on device (ENOSPC)" in message
    assert files.root in message  # the path
    assert "Nothing of step 2 was committed" in message
    assert "step 1, is intact" in message
    assert "Free space at" in message
    assert "then save again" in message
    assert {p: files.read(p) for p in before} == before
    assert [i.step for i in store.list("r")] == [1]
    assert store.load("r").state["step"] == 1
    assert not [b for b in files.blobs() if b.endswith(".tmp")]
    store.save("r", 2, {"w": torch.zeros(300_000), "step": 2})  # space again: no repair needed
    assert store.load("r").state["step"] == 2


def test_an_unwritable_location_says_whose_permission_is_missing(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(url, publish_events=False)
    with (
        failing_writes(monkeypatch, url, "data", errno.EACCES),
        pytest.raises(StoreError) as caught,
    ):
        store.save("r", 1, {"x": torch.ones(2)})
    assert "(EACCES)" in str(caught.value)
    assert "writable for you" in str(caught.value)
    assert "no earlier checkpoint of this run is there" in str(caught.value)


class Thing:
    pass


@pytest.mark.parametrize(
    ("state", "pattern"),
    [
        ({"optim": {"x": Thing()}}, r"state\['optim'\]\['x'\]: it is a test_store_errors.Thing"),
        ({"fns": [1, len]}, r"state\['fns'\]\[1\]: it is a builtin_function_or_method"),
        (
            {"s": torch.ones(3).to_sparse()},
            r"state\['s'\]: a torch tensor .* layout torch.sparse_coo",
        ),
        ({"a": np.array([object()])}, r"state\['a'\]: a NumPy array of dtype object"),
        ({"k": {Thing(): 1}}, r"key <.*Thing object"),
    ],
)
def test_an_unsupported_value_is_named_with_its_path_and_type(
    store: CheckpointStore, state: dict[str, Any], pattern: str
) -> None:
    with pytest.raises(StoreError, match=pattern):
        store.save("r", 1, state)
    assert store.list("r") == []


def test_a_reference_cycle_is_refused(store: CheckpointStore) -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(StoreError, match=r"state\['l'\]\[1\]: .*reference cycle"):
        store.save("r", 1, {"l": loop})


def test_metadata_holds_plain_values_only(store: CheckpointStore) -> None:
    with pytest.raises(StoreError, match=r"metadata\['t'\]: it is a torch.Tensor"):
        store.save("r", 1, {}, {"t": torch.ones(1)})
    with pytest.raises(StoreError, match="metadata must be a dict"):
        store.save("r", 1, {}, [1, 2])  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="state to save must be a dict"):
        store.save("r", 1, [torch.ones(1)])  # type: ignore[arg-type]


@pytest.mark.parametrize("run", ["", "../escape", "a/b", ".hidden", "x" * 200, "blobs", 7, None])
def test_bad_run_names_never_become_paths(store: CheckpointStore, files: Any, run: Any) -> None:
    for call in (
        lambda: store.save(run, 1, {"x": 1}),
        lambda: store.load(run),
        lambda: store.list(run),
        lambda: store.delete(run, 1),
    ):
        with pytest.raises(UnsafeName):
            call()
    assert files.blobs() == []


@pytest.mark.parametrize("step", [-1, 1.5, True, "3", 10**12, None])
def test_bad_steps_are_refused(store: CheckpointStore, step: Any) -> None:
    with pytest.raises(StoreError, match="A checkpoint step must be an int from 0 to 999999999999"):
        store.save("r", step, {"x": 1})


def test_numpy_integer_steps_are_fine(store: CheckpointStore) -> None:
    assert store.save("r", np.int64(5), {"x": 1}).step == 5  # type: ignore[arg-type]


def test_missing_runs_and_steps(store: CheckpointStore) -> None:
    store.save("there", 3, {"x": 1})
    with pytest.raises(
        CheckpointNotFound, match=r"Run 'nope' has no committed checkpoint .*runs there: 'there'"
    ):
        store.load("nope")
    with pytest.raises(
        CheckpointNotFound, match=r"no committed checkpoint at step 4 .*newest committed steps: 3"
    ):
        store.load("there", 4)
    with pytest.raises(CheckpointNotFound):
        store.verify("there", 4)
    with pytest.raises(CheckpointNotFound):
        store.delete("nope", 1)
    assert store.runs() == ["there"]  # delete of a missing run created nothing


def test_a_committed_step_is_never_overwritten(store: CheckpointStore) -> None:
    store.save("r", 1, {"x": 1})
    with pytest.raises(StoreError, match=re.escape("already has a committed checkpoint at step 1")):
        store.save("r", 1, {"x": 2})
    assert store.load("r").state == {"x": 1}


@pytest.mark.parametrize("keep", [0, -1, 1.5, "3"])
def test_keep_must_be_positive(url: str, keep: Any) -> None:
    with pytest.raises(StoreError, match="keep must be a positive int or None"):
        CheckpointStore(url, keep=keep)


def test_a_file_is_not_a_store(tmp_path: Any) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(StoreError, match="is a file, not a folder"):
        CheckpointStore(tmp_path / "f")


def test_a_location_that_cannot_be_created(tmp_path: Any) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        StoreError, match=r"Cannot open the checkpoint location .*file/store.*Errno"
    ):
        CheckpointStore(tmp_path / "file" / "store")
