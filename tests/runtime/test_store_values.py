"""Numbers a store holds: finite and positive, checked on read and on merge (issue 23)."""

from __future__ import annotations

import json
import math
import warnings

import pytest
from runtime_helpers import cfg, entry

from flashtune.kernels.config import Config
from flashtune.kernels.source_hash import kernel_source_hash
from flashtune.runtime.storage.buckets import Bucket
from flashtune.runtime.storage.store import Store, StoreWarning, read_snapshot, triton_version

B1 = Bucket("bfloat16", False, 128, 1, 4096, 4096)
B2 = Bucket("bfloat16", True, 128, 1, 4096, 4096)


def _key(h200):
    return (h200.fingerprint, kernel_source_hash(), triton_version())


def test_an_out_of_range_number_is_refused_as_nan_is(store_path, h200):
    Store(store_path).merge([entry(h200, B1, cfg(128, 64, 8, 3), 2.0)])
    store_path.write_text(store_path.read_text().replace('"median_ms": 2.0', '"median_ms": 1e400'))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        snap = read_snapshot(store_path)
        assert snap.exact(_key(h200), B1) is None  # never served as an exact hit at inf ms
    assert any("non-finite number 1e400" in str(w.message) for w in caught if w.category is StoreWarning)


@pytest.mark.parametrize("median_ms", [0.0, -5.0, math.nan, -math.inf])
def test_a_merge_refuses_a_time_no_gpu_gives(store_path, h200, median_ms):
    with pytest.raises(ValueError, match=r"entries\[0\] .*median_ms must be a finite positive number"):
        Store(store_path).merge([entry(h200, B1, cfg(128, 64, 8, 3), median_ms)])
    assert not store_path.exists()


def test_a_zero_time_in_a_file_is_unusable_not_the_best_forever(store_path, h200):
    Store(store_path).merge([entry(h200, B1, cfg(128, 64, 8, 3), 2.0)])
    store_path.write_text(store_path.read_text().replace('"median_ms": 2.0', '"median_ms": 0.0'))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreWarning)
        Store(store_path).merge([entry(h200, B1, cfg(256, 64, 8, 3), 1.5)])
    assert read_snapshot(store_path).exact(_key(h200), B1).config == cfg(256, 64, 8, 3)


def test_a_merge_says_what_it_dropped_and_keeps_it(store_path, h200):
    Store(store_path).merge([entry(h200, B1, cfg(128, 64, 8, 3), 2.0), entry(h200, B2, cfg(128, 64, 8, 3), 3.0)])
    doc = json.loads(store_path.read_text())
    doc["entries"][1]["config"]["BLOCK_M"] = 7  # outside the kernel's space
    store_path.write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        total = Store(store_path).merge([entry(h200, B1, cfg(256, 64, 8, 3), 1.5)])
    assert total == 1
    messages = [str(w.message) for w in caught if w.category is StoreWarning]
    assert any("1 unusable entries dropped from the file by this write (kept in configs.json.dropped." in m
               for m in messages), messages
    (aside,) = store_path.parent.glob("configs.json.dropped.*")
    assert json.loads(aside.read_text())[0]["config"]["BLOCK_M"] == 7


def test_an_entry_without_the_implied_knobs_equals_the_completed_one(store_path, h200):
    """What ``export table:PATH`` compares: the store completes configs of older tables."""
    bare = Config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
    Store(store_path).merge([entry(h200, B1, bare, 2.0)])
    assert read_snapshot(store_path).exact(_key(h200), B1).config == cfg(128, 64, 8, 3)
