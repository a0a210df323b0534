"""Concurrent writers lose nothing and readers only ever see whole, valid files."""

from __future__ import annotations

import multiprocessing as mp
import time
import warnings
from pathlib import Path

from flashtune.kernels.config import Config
from flashtune.kernels.source_hash import kernel_source_hash
from flashtune.kernels.space import validate_config
from flashtune.runtime.storage.buckets import Bucket
from flashtune.runtime.storage.store import Store, StoreEntry, StoreWarning, read_snapshot, triton_version

WRITERS = 4
ENTRIES_PER_WRITER = 8
FINGERPRINT = "00112233445566ff"
SHARED = Bucket("float16", True, 64, 1, 2, 2)


def _entry(bucket: Bucket, ms: float) -> StoreEntry:
    config = validate_config(Config(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2))
    return StoreEntry(FINGERPRINT, kernel_source_hash(), triton_version(), bucket, config, median_ms=ms)


def _write(path: str, writer: int) -> None:
    store = Store(path)
    for i in range(ENTRIES_PER_WRITER):
        # One merge per entry, so writers interleave; every writer also races on SHARED.
        bucket = Bucket("float16", False, 64, 1, 2 ** (writer + 1), 2 ** (i + 1))
        store.merge([_entry(bucket, 1.0 + writer), _entry(SHARED, 10.0 - writer - i / 100)])


def _read(path: str, stop, results) -> None:
    reads = problems = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        while not stop.is_set() or reads == 0:
            try:
                snap = read_snapshot(path)
                if len(snap) == 0 and Path(path).exists():
                    problems += 1  # a non-empty store read as empty: a torn read
            except Exception:  # the test counts what must never happen
                problems += 1
            reads += 1
            time.sleep(0.001)  # leave the CPU to the writers on a small machine
        problems += sum(1 for w in caught if issubclass(w.category, StoreWarning))
    results.put((reads, problems))


def test_concurrent_writers_and_readers(tmp_path):
    path = str(tmp_path / "configs.json")
    # fork: the children run only pure-Python store code, and spawn costs a second each here.
    ctx = mp.get_context("fork")
    # Seed the file so that readers always expect entries.
    Store(path).merge([_entry(Bucket("float32", False, 32, 1, 1, 1), 5.0)])
    results, stop = ctx.Queue(), ctx.Event()
    readers = [ctx.Process(target=_read, args=(path, stop, results)) for _ in range(2)]
    writers = [ctx.Process(target=_write, args=(path, w)) for w in range(WRITERS)]
    for p in readers + writers:
        p.start()
    for p in writers:
        p.join(timeout=120)
        assert p.exitcode == 0
    stop.set()
    counts = [results.get(timeout=60) for _ in readers]
    for p in readers:
        p.join(timeout=60)
    assert all(reads > 0 for reads, _ in counts)
    assert [problems for _, problems in counts] == [0, 0], counts
    snap = read_snapshot(path)
    assert len(snap) == 1 + WRITERS * ENTRIES_PER_WRITER + 1
    key = (FINGERPRINT, kernel_source_hash(), triton_version())
    assert snap.exact(key, SHARED).median_ms == min(10.0 - w - i / 100 for w in range(WRITERS) for i in range(ENTRIES_PER_WRITER))
