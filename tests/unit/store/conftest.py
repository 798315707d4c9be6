"""Fixtures of the checkpoint store tests: every test that takes ``url`` runs against a
local folder and against ``memory://``, the two backends of the store."""

from __future__ import annotations

import os
import posixpath
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import fsspec.implementations.local
import numpy as np
import pytest
import torch

from ft_notebook.store import CheckpointStore


@pytest.fixture(params=["local", "memory"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "local":
        yield str(tmp_path / "store")
        return
    root = f"memory://ft-store-{uuid.uuid4().hex}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture
def store(url: str) -> Iterator[CheckpointStore]:
    with CheckpointStore(url, keep=3) as s:
        yield s


class Files:
    """Raw access to what a store wrote, to inspect and damage it behind its back."""

    def __init__(self, url: str) -> None:
        self.fs, self.root = fsspec.core.url_to_fs(url)

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def manifest(self, run: str, step: int) -> str:
        return self.path(run, f"{step:012d}", "manifest.json")

    def blob(self, key: str) -> str:
        return self.path("blobs", key)

    def blobs(self) -> list[str]:
        if not self.fs.exists(self.path("blobs")):
            return []
        return sorted(posixpath.basename(p) for p in self.fs.ls(self.path("blobs"), detail=False))

    def read(self, path: str) -> bytes:
        return bytes(self.fs.cat_file(path))

    def write(self, path: str, data: bytes) -> None:
        self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
        self.fs.pipe_file(path, data)

    def identity(self, path: str) -> object:
        """Changes whenever the file is written again, even with the same bytes."""
        if isinstance(self.fs, fsspec.implementations.local.LocalFileSystem):
            info = os.stat(path)
            return (info.st_ino, info.st_mtime_ns)
        return id(self.fs.store[path])

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(path))

    def files_of(self, run: str, step: int) -> list[str]:
        """The manifest and every blob that checkpoint lists."""
        import json

        manifest = self.manifest(run, step)
        return [manifest, *(self.blob(k) for k in json.loads(self.read(manifest))["files"])]


@pytest.fixture
def files(url: str) -> Files:
    return Files(url)


@pytest.fixture
def files_at() -> Callable[[str], Files]:
    return Files


def nested_state(seed: int, *, big: int = 300_000) -> dict[str, Any]:
    """A training-like state: tensors of several dtypes, arrays, RNG and plain values.
    Every tensor and array depends on ``seed``, so two seeds share no blob."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = OrderedDict(
        [
            ("w", torch.randn(big, generator=g)),  # above the pack threshold: a blob of its own
            ("b16", torch.randn(64, generator=g).to(torch.bfloat16)),
            ("h", torch.randn(3, 5, generator=g).to(torch.float16)),
            ("i", torch.randint(-(2**40), 2**40, (7,), generator=g)),
            ("mask", torch.rand(9, generator=g) > 0.5),
            ("u8", torch.randint(0, 255, (4,), generator=g, dtype=torch.uint8)),
            ("c", torch.randn(3, generator=g, dtype=torch.complex64)),
            ("scalar", torch.tensor(float(seed))),
            ("empty", torch.empty(0, 3)),
        ]
    )
    model._metadata = OrderedDict([("", {"version": 1})])  # type: ignore[attr-defined]
    return {
        "model": model,
        "optim": {
            "state": {
                0: {"step": torch.tensor(float(seed)), "exp_avg": torch.randn(5, generator=g)}
            },
            "param_groups": [{"lr": 1e-3 * (seed + 1), "betas": (0.9, 0.999), "params": [0]}],
        },
        "arrays": {
            "f64": rng.standard_normal((4, 3)),
            "i32": rng.integers(0, 100, 6, dtype=np.int32),
            "bool": rng.random(5) > 0.5,
            "big_endian": rng.standard_normal(3).astype(">f4"),
            "strided": rng.standard_normal((6, 4))[::2, 1:],
            "zero_d": np.array(seed, dtype=np.int64),
        },
        "plain": {
            "seed": seed,
            "tuple": (1, "two", 3.0, None, True),
            "nonfinite": [float("nan"), float("inf"), -float("inf")],
            "bytes": bytes(range(seed % 7, 20)),
            "int_keys": {1: "a", 2: "b"},
            "tag_key": {"__ft__": "not a tag"},
            "set": {1, 2, 3},
            "complex": 1 + 2j,
            "np_scalar": np.float32(seed + 0.5),
            "size": torch.Size([2, 3]),
            "dtype": torch.bfloat16,
            "rng_py": __import__("random").Random(seed).getstate(),
            "rng_np": np.random.default_rng(seed).bit_generator.state,
            "rng_torch": g.get_state(),
        },
    }


def assert_same(a: Any, b: Any, path: str = "state") -> None:
    """Equal values of equal types, tensors compared bit for bit."""
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), path
        if a.numel():  # bit for bit: NaN, -0.0, bfloat16 and complex included
            bits = [
                x.clone(memory_format=torch.contiguous_format).reshape(-1).view(torch.uint8)
                for x in (a, b)
            ]
            assert torch.equal(*bits), path
    elif isinstance(a, np.ndarray):
        assert (a.dtype.newbyteorder("<"), a.shape) == (b.dtype.newbyteorder("<"), b.shape), path
        assert np.array_equal(a, b), path
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
        assert getattr(a, "_metadata", None) == getattr(b, "_metadata", None), path
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and a != a:
        assert b != b, path
    else:
        assert a == b, path


@pytest.fixture
def make_state() -> Callable[..., dict[str, Any]]:
    return nested_state


@pytest.fixture
def same() -> Callable[[Any, Any], None]:
    return assert_same
