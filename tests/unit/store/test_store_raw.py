"""Raw checkpoints: blobs the caller hashed itself (what notebook snapshots use)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import xxhash

from ft_notebook.exceptions import CheckpointCorrupt, StoreError, StoreUnsafe
from ft_notebook.store import CheckpointStore


def _key(data: bytes, ext: str = "bin") -> str:
    return f"{xxhash.xxh3_128_hexdigest(data)}.{ext}"


def test_raw_blobs_round_trip_and_reuse(store: CheckpointStore) -> None:
    a, b = b"alpha" * 1000, b"beta" * 1000
    store.save_raw("nb", 1, {"vars": ["a"]}, {_key(a): a}, metadata={"name": "latest"})
    store.save_raw("nb", 2, {"vars": ["a", "b"]}, {_key(b): b}, {_key(a): len(a)})
    raw = store.open_raw("nb")
    assert (raw.info.step, raw.state) == (2, {"vars": ["a", "b"]})
    assert bytes(raw.read(_key(a))) == a
    assert bytes(raw.read(_key(b))) == b
    store.delete("nb", 1)  # the blob step 2 reuses must survive its first owner
    assert bytes(store.open_raw("nb").read(_key(a))) == a
    assert store.list("nb")[0].metadata == {}
    with pytest.raises(StoreError, match="not part of step 2"):
        raw.read(_key(b"other"))


def test_reusing_a_blob_that_is_not_there_is_refused(store: CheckpointStore) -> None:
    with pytest.raises(StoreError, match="reuses is missing"):
        store.save_raw("nb", 1, {}, {}, {_key(b"never written"): 13})
    assert store.list("nb") == []


def test_malformed_keys_are_refused(store: CheckpointStore) -> None:
    with pytest.raises(StoreError, match="raw blob key"):
        store.save_raw("nb", 1, {}, {"../../etc/passwd": b"x"})
    with pytest.raises(StoreError, match="raw blob key"):
        store.save_raw("nb", 1, {}, {_key(b"x", "safetensors"): b"x"})


def test_a_changed_blob_is_caught_when_read(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "s", keep=None)
    data = os.urandom(4096)
    store.save_raw("nb", 1, {}, {_key(data): data})
    blob = tmp_path / "s" / "blobs" / _key(data)
    raw = bytearray(blob.read_bytes())
    raw[100] ^= 0xFF
    blob.chmod(0o600)
    blob.write_bytes(bytes(raw))
    with pytest.raises(CheckpointCorrupt, match="does not match the manifest"):
        store.open_raw("nb").read(_key(data))


def test_read_into_fills_the_callers_buffer_and_checks_size(store: CheckpointStore) -> None:
    data = os.urandom(3 * 4096 + 17)
    store.save_raw("nb", 1, {}, {_key(data): data})
    raw = store.open_raw("nb")
    out = bytearray(len(data))
    raw.read_into(_key(data), memoryview(out))
    assert bytes(out) == data
    with pytest.raises(StoreError, match="not 100"):
        raw.read_into(_key(data), memoryview(bytearray(100)))
    with pytest.raises(StoreError, match="not part of step 1"):
        raw.read_into(_key(b"other"), memoryview(bytearray(5)))


@pytest.mark.parametrize("change", ["flip", "truncate", "grow"])
def test_read_into_catches_a_changed_blob(tmp_path: Path, change: str) -> None:
    store = CheckpointStore(tmp_path / "s", keep=None)
    data = os.urandom(8192)
    store.save_raw("nb", 1, {}, {_key(data): data})
    blob = tmp_path / "s" / "blobs" / _key(data)
    changed = {
        "flip": data[:100] + bytes([data[100] ^ 0xFF]) + data[101:],
        "truncate": data[:-1],
        "grow": data + b"x",
    }[change]
    blob.chmod(0o600)
    blob.write_bytes(changed)
    with pytest.raises(CheckpointCorrupt, match="does not match the manifest"):
        store.open_raw("nb").read_into(_key(data), memoryview(bytearray(len(data))))


def test_a_damaged_newest_state_falls_back_to_the_one_before(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "s", keep=None)
    one, two = b"1" * 100, b"2" * 100
    store.save_raw("nb", 1, {"v": 1}, {_key(one): one})
    store.save_raw("nb", 2, {"v": 2}, {_key(two): two})
    manifest = tmp_path / "s" / "nb" / f"{2:012d}" / "manifest.json"
    manifest.chmod(0o600)
    manifest.write_bytes(manifest.read_bytes().replace(b'"step": 2', b'"step": 3'))
    assert store.open_raw("nb").state == {"v": 1}


def test_pickles_need_allow_pickle_and_a_private_location(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "s", keep=None)
    data = b"\x80\x05K\x01."  # pickle.dumps(1)
    store.save_raw("nb", 1, {}, {_key(data, "pkl"): data})
    with pytest.raises(StoreError, match="holds pickles"):
        store.open_raw("nb")
    assert bytes(store.open_raw("nb", allow_pickle=True).read(_key(data, "pkl"))) == data
    os.chmod(tmp_path / "s", 0o777)
    try:
        with pytest.raises(StoreUnsafe):
            store.open_raw("nb", allow_pickle=True)
        with pytest.raises(StoreUnsafe):
            store.save_raw("nb", 2, {}, {_key(data, "pkl"): data})
    finally:
        os.chmod(tmp_path / "s", 0o700)
