"""A store at the size limit is read without validating what the process does not look up."""

from __future__ import annotations

import json
import time

import pytest
import torch
from runtime_helpers import cfg, entry, store_warnings

import flashtune.runtime.storage.store as store_module
from flashtune.kernels.source_hash import kernel_source_hash
from flashtune.runtime.dispatching.dispatch import Dispatcher
from flashtune.runtime.storage.buckets import Bucket
from flashtune.runtime.storage.store import MAX_STORE_BYTES, Store, read_snapshot, triton_version

#: Entries of a store at the limit (issue 16: 32 MB and 80,000 entries took the op's first
#: call 29 s and 700 MB, validating every entry of the GPU's group).
LIMIT_ENTRIES = 80_000


class _CountingValidator:
    """Wraps the entry validator, counting the entries it checks."""

    def __init__(self, inner) -> None:
        self.inner, self.checked = inner, 0

    def iter_errors(self, raw):
        self.checked += 1
        return self.inner.iter_errors(raw)


def _buckets(n: int) -> list[Bucket]:
    return [Bucket("float16", causal, 64, gqa, 2**q, 2**k)
            for causal in (False, True) for gqa in (1, 2, 4, 8) for q in range(20) for k in range(20)][:n]


def test_a_lookup_validates_only_the_entries_of_its_bucket(store_path, h200, monkeypatch):
    buckets = _buckets(300)
    Store(store_path).merge([entry(h200, b, cfg(64, 32, 4, 2), 1.0 + i) for i, b in enumerate(buckets)])
    key = (h200.fingerprint, kernel_source_hash(), triton_version())
    counter = _CountingValidator(store_module._ENTRY_VALIDATOR)
    monkeypatch.setattr(store_module, "_ENTRY_VALIDATOR", counter)
    snap = read_snapshot(store_path)
    assert snap.exact(key, buckets[7]).median_ms == 8.0
    assert counter.checked == 1
    nearest = next(iter(snap.nearest(key, buckets[7])))
    assert nearest.bucket != buckets[7] and counter.checked == 2
    assert len(snap) == 300 and counter.checked == 300


def test_an_unusable_entry_warns_when_its_bucket_is_reached(store_path, h200):
    buckets = _buckets(3)
    Store(store_path).merge([entry(h200, b, cfg(64, 32, 4, 2)) for b in buckets])
    doc = json.loads(store_path.read_text())
    doc["entries"][2]["config"]["BLOCK_M"] = "huge"
    bad = Bucket.from_dict(doc["entries"][2]["bucket"])
    store_path.write_text(json.dumps(doc))
    key = (h200.fingerprint, kernel_source_hash(), triton_version())
    snap = read_snapshot(store_path)
    good = next(b for b in buckets if b != bad)
    with store_warnings() as caught:
        assert snap.exact(key, good) is not None
    assert not caught
    with store_warnings() as caught:
        assert snap.exact(key, bad) is None
        assert len(snap) == 2
    assert len(caught) == 1 and "BLOCK_M" in str(caught[0].message)


@pytest.mark.slow
def test_a_store_at_the_size_limit_is_served(store_path, h200):
    """Builds 80,000 entries (just under 32 MB), then times the op's first lookup (printed:
    a figure for BENCHMARKS, not asserted; run with -s to see it)."""
    template = entry(h200, Bucket("float16", False, 64, 1, 1, 1), cfg(64, 32, 4, 2), 1.0, source="m", hardware="").to_dict()
    buckets = [Bucket(dtype, causal, head_dim, gqa, 2**q, 2**k)
               for dtype in ("float16", "bfloat16") for causal in (False, True)
               for head_dim in (16, 24, 32, 48, 64, 80, 96, 112, 128, 256) for gqa in (1, 2, 3, 4, 8, 16, 32, 64)
               for q in range(16) for k in range(16)][:LIMIT_ENTRIES]
    # Configs as older stores wrote them: knobs with their implied value left out (the kernel
    # and tile order knobs came later), so 80,000 entries stay under the limit.
    template["config"] = {k: v for k, v in template["config"].items() if k not in ("kernel", "tile_order")}
    entries = [{**template, "bucket": b.to_dict(), "median_ms": 1.0 + i / LIMIT_ENTRIES} for i, b in enumerate(buckets)]
    target = Bucket("bfloat16", False, 128, 1, 4096, 4096)
    entries[buckets.index(target)]["config"] = cfg(128, 64, 8, 3).to_dict()
    store_path.write_text(json.dumps({"format": "flashtune.configs", "version": 1, "entries": entries},
                                     separators=(",", ":")))
    size = store_path.stat().st_size
    assert len(entries) == LIMIT_ENTRIES and size <= MAX_STORE_BYTES
    del entries

    q = torch.empty(1, 1, 4096, 128, dtype=torch.bfloat16)
    missing = torch.empty(1, 1, 2**17, 128, dtype=torch.bfloat16)  # no entry: the nearest serves
    d = Dispatcher(store_path, hardware=lambda device: h200)
    with store_warnings() as caught:
        wall, cpu = time.perf_counter(), time.process_time()
        config = d.config_for(q, q)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        near = time.perf_counter()
        origin = d.explain(missing, missing).origin
        near = time.perf_counter() - near
    assert not caught
    assert config == cfg(128, 64, 8, 3) and d.explain(q, q).origin == "exact" and origin == "nearest"
    print(f"\nstore at the limit ({LIMIT_ENTRIES} entries, {size / 2**20:.1f} MiB): first lookup "
          f"{wall:.2f} s wall, {cpu:.2f} s CPU; a nearest-bucket lookup then {near:.3f} s")
