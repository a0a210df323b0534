"""A bad store file is one warning and the fallback: never an exception, never code execution."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import cfg, entry, store_warnings

from flashtune.kernels.space import validate_config
from flashtune.objectives.hardware import HardwareSpec
from flashtune.runtime.dispatching.resolve import resolve
from flashtune.runtime.storage.buckets import Bucket
from flashtune.runtime.storage.store import MAX_STORE_BYTES, Snapshot, Store, read_snapshot

BUCKET = Bucket("float16", False, 64, 1, 128, 128)


def _valid_file(path: Path, spec: HardwareSpec) -> bytes:
    Store(path).merge([entry(spec, BUCKET, cfg(128, 64, 4, 2), 0.5)])
    return path.read_bytes()


def _key(spec: HardwareSpec, snapshot: Snapshot):
    entries = list(snapshot.entries())
    return entries[0].key if entries else None


def _assert_fallback(snapshot: Snapshot, spec: HardwareSpec) -> None:
    assert len(snapshot) == 0
    resolution = resolve(BUCKET, snapshot, spec, (spec.fingerprint, "0" * 16, "x"))
    assert resolution.origin == "baseline"


def test_valid_file_is_served(store_path, h200):
    _valid_file(store_path, h200)
    with store_warnings() as caught:
        snap = read_snapshot(store_path)
    assert not caught and len(snap) == 1
    key = _key(h200, snap)
    assert resolve(BUCKET, snap, h200, key).config == cfg(128, 64, 4, 2)


def test_truncation_at_every_byte(store_path, h200):
    data = _valid_file(store_path, h200)
    assert len(data) < 2000  # keep the loop fast
    for n in range(len(data)):
        store_path.write_bytes(data[:n])
        complete = data[:n].strip() == data.strip()  # only the trailing newline is missing
        with store_warnings() as caught:
            snap = read_snapshot(store_path)
            again = read_snapshot(store_path)  # same state: no second warning
            if complete:
                assert len(snap) == 1
            else:
                _assert_fallback(snap, h200)
                _assert_fallback(again, h200)
        assert len(caught) == (0 if complete else 1), (n, [str(w.message) for w in caught])


def test_random_bytes_and_byte_flips(store_path, h200):
    data = _valid_file(store_path, h200)
    rng = np.random.default_rng(7)
    blobs = [rng.integers(0, 256, size=int(rng.integers(0, 3000)), dtype=np.uint8).tobytes() for _ in range(150)]
    for _ in range(300):
        flipped = bytearray(data)
        for pos in rng.integers(0, len(data), size=int(rng.integers(1, 4))):
            flipped[pos] = int(rng.integers(0, 256))
        blobs.append(bytes(flipped))
    for blob in blobs:
        store_path.write_bytes(blob)
        with store_warnings() as caught:
            snap = read_snapshot(store_path)
            usable = list(snap.entries())
            resolve(BUCKET, snap, h200, (h200.fingerprint, "0" * 16, "x"))
        assert len(caught) <= 1
        # Whatever survives a flip is a valid entry: every config in the space.
        for e in usable:
            assert validate_config(e.config) == e.config


def _doc(store_path: Path, h200: HardwareSpec) -> dict:
    return json.loads(_valid_file(store_path, h200))


def _set(doc: dict, path: tuple, value) -> dict:
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return doc


WRONG = [
    (("format",), "pickle"),
    (("version",), "1"),
    (("version",), 4),  # stale: a newer format
    (("entries",), {"a": 1}),
    (("entries", 0), "entry"),
    (("entries", 0, "fingerprint"), 123),
    (("entries", 0, "fingerprint"), "../../etc/passwd"),
    (("entries", 0, "triton"), ["3.6.0"]),
    (("entries", 0, "bucket"), None),
    (("entries", 0, "bucket", "head_dim"), "64"),
    (("entries", 0, "bucket", "head_dim"), True),
    (("entries", 0, "bucket", "causal"), "no"),
    (("entries", 0, "bucket", "dtype"), "int4"),
    (("entries", 0, "bucket", "q_len"), 1000),  # not a power of two
    (("entries", 0, "bucket", "gqa"), 2**40),
    (("entries", 0, "bucket", "kind"), "sparse"),
    (("entries", 0, "bucket", "page_size"), 16),  # pages on a prefill bucket
    (("entries", 0, "config"), [64, 32]),
    (("entries", 0, "config", "BLOCK_M"), 64.5),
    (("entries", 0, "config", "BLOCK_M"), "64"),
    (("entries", 0, "config", "BLOCK_M"), 48),  # not in the space
    (("entries", 0, "config", "BLOCK_M"), {"__class__": "os.system"}),
    (("entries", 0, "config", "evil"), 1),  # unknown tunable
    (("entries", 0, "median_ms"), "fast"),
    (("entries", 0, "median_ms"), -1),
    (("entries", 0, "extra"), 1),
    (("extra",), 1),
]


@pytest.mark.parametrize("path, value", WRONG, ids=lambda x: repr(x)[:40])
def test_wrong_types_and_values(store_path, h200, path, value):
    doc = _set(_doc(store_path, h200), path, value)
    store_path.write_text(json.dumps(doc))
    with store_warnings() as caught:
        snap = read_snapshot(store_path)
        _assert_fallback(snap, h200)
        _assert_fallback(read_snapshot(store_path), h200)
    assert len(caught) == 1, [str(w.message) for w in caught]


class _Payload:
    """Unpickling this object would create the sentinel file."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self):
        return (open, (str(self.sentinel), "w"))


def test_pickle_payload_is_never_executed(store_path, h200, tmp_path):
    sentinel = tmp_path / "pwned"
    payload = pickle.dumps({"format": "flashtune.configs", "x": _Payload(sentinel)})
    assert not sentinel.exists()
    for blob in (payload, payload + b"\n", b'{"format": "flashtune.configs", "p": "' + payload.hex().encode() + b'"}'):
        store_path.write_bytes(blob)
        with store_warnings() as caught:
            _assert_fallback(read_snapshot(store_path), h200)
        assert len(caught) == 1
    assert not sentinel.exists()
    # The loader through the Store class and the dispatcher's path as well.
    store_path.write_bytes(payload)
    with store_warnings() as caught:
        assert len(Store(store_path).snapshot()) == 0
    assert not sentinel.exists()


HOSTILE = {
    "deep nesting": b"[" * 200_000 + b"]" * 200_000,
    "deep objects": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "huge integer": b'{"format": "flashtune.configs", "version": ' + b"9" * 10_000 + b', "entries": []}',
    "NaN": b'{"format": "flashtune.configs", "version": 1, "entries": [], "x": NaN}',
    "Infinity": b'{"format": "flashtune.configs", "version": 1, "entries": [{"median_ms": Infinity}]}',
    "duplicate keys": b'{"format": "flashtune.configs", "version": 1, "version": 1, "entries": []}',
    "not UTF-8": b'{"format": "flashtune.configs\xff\xfe", "version": 1, "entries": []}',
    "UTF-16": json.dumps({"format": "flashtune.configs", "version": 1, "entries": []}).encode("utf-16"),
    "a list": b"[]",
    "a string": b'"flashtune.configs"',
    "null": b"null",
    "empty": b"",
    "whitespace": b"   \n\t  ",
    "too many entries": json.dumps({"format": "flashtune.configs", "version": 1, "entries": [0] * 100_001}).encode(),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_content(store_path, h200, name):
    store_path.write_bytes(HOSTILE[name])
    with store_warnings() as caught:
        _assert_fallback(read_snapshot(store_path), h200)
        _assert_fallback(read_snapshot(store_path), h200)
    assert len(caught) == 1, [str(w.message) for w in caught]


def test_hostile_paths_do_not_hang_or_flood(tmp_path, h200):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opening a FIFO for reading blocks unless non-blocking
    directory = tmp_path / "dir.json"
    directory.mkdir()
    device = tmp_path / "zero.json"
    device.symlink_to("/dev/zero")  # endless bytes
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:
        handle.truncate(MAX_STORE_BYTES + 1)  # sparse: refused by size before reading
    for path in (fifo, directory, device, big):
        with store_warnings() as caught:
            _assert_fallback(read_snapshot(path), h200)
        assert len(caught) == 1, (path.name, [str(w.message) for w in caught])


def test_missing_file_is_an_empty_store_without_warning(tmp_path, h200):
    with store_warnings() as caught:
        snap = read_snapshot(tmp_path / "nothing" / "configs.json")
    assert not caught
    _assert_fallback(snap, h200)


def test_one_warning_per_file_state(store_path, h200):
    store_path.write_text("{")
    with store_warnings() as caught:
        for _ in range(3):
            read_snapshot(store_path)
        store_path.write_text("{{")  # another state: warns again, once
        for _ in range(3):
            read_snapshot(store_path)
    assert len(caught) == 2


def test_stale_entries_are_ignored_with_one_warning(store_path, h200):
    Store(store_path).merge([
        entry(h200, BUCKET, cfg(128, 64, 4, 2), kernel_hash="0123456789abcdef"),
        entry(h200, Bucket("float16", False, 64, 1, 256, 256), cfg(128, 64, 4, 2), triton="2.0.0"),
    ])
    snap = read_snapshot(store_path)
    key = (h200.fingerprint, entry(h200, BUCKET, cfg(64, 64, 4, 2)).kernel_hash, entry(h200, BUCKET, cfg(64, 64, 4, 2)).triton)
    with store_warnings() as caught:
        first = resolve(BUCKET, snap, h200, key)
        second = resolve(Bucket("float16", True, 64, 1, 128, 128), snap, h200, key)
    assert first.origin == second.origin == "baseline"
    assert len(caught) == 1 and "another kernel source or Triton" in str(caught[0].message)
