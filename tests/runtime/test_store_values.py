"""Numbers a store holds: finite and positive, checked on read and on merge (issue 23)."""

from __future__ import annotations

import json
import math
import warnings

import pytest
from runtime_helpers import cfg, entry, store_warnings

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


# One bad number in one entry: that entry is skipped, the others are served, and a write
# onto the file keeps them (it once made the whole file unreadable and moved it aside).
BAD_NUMBERS = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity", "1e400": "1e400",
               "5000 digits": "9" * 5000}
B3 = Bucket("float16", False, 64, 1, 1024, 1024)


def _store_with_a_bad_number(store_path, h200, text: str, field: str = '"median_ms": 2.0') -> None:
    Store(store_path).merge([entry(h200, B1, cfg(128, 64, 8, 3), 2.0), entry(h200, B2, cfg(128, 64, 8, 3), 3.0),
                             entry(h200, B3, cfg(64, 64, 4, 2), 0.5)])
    written = store_path.read_text()
    assert written.count(field) == 1
    store_path.write_text(written.replace(field, field.split(":")[0] + ": " + text))


@pytest.mark.parametrize("name", list(BAD_NUMBERS))
def test_one_bad_number_skips_its_entry_and_serves_the_others(store_path, h200, name):
    _store_with_a_bad_number(store_path, h200, BAD_NUMBERS[name])
    with store_warnings() as caught:
        snap = read_snapshot(store_path)
        assert snap.exact(_key(h200), B1) is None
        assert snap.exact(_key(h200), B2).median_ms == 3.0
        assert snap.exact(_key(h200), B3).median_ms == 0.5
        assert len(snap) == 2
    (warning,) = caught
    said = str(warning.message)
    assert "unusable entries skipped: entries/" in said and "/median_ms: " in said, said
    assert ("digits (too long)" if name == "5000 digits" else f"non-finite number {name}") in said, said
    assert len(said) < 400  # the 5000 digits are counted, not quoted


@pytest.mark.parametrize("field", ['"head_dim": 64', '"q_len": 1024', '"BLOCK_M": 64'])
def test_a_bad_number_in_a_bucket_or_config_skips_its_entry(store_path, h200, field):
    _store_with_a_bad_number(store_path, h200, "NaN", field)
    with store_warnings() as caught:
        snap = read_snapshot(store_path)
        near = list(snap.nearest(_key(h200), Bucket("float16", False, 64, 1, 2048, 2048)))
        assert snap.exact(_key(h200), B3) is None and near == []
        assert snap.exact(_key(h200), B1).median_ms == 2.0 and len(snap) == 2
    assert len(caught) == 1 and "non-finite number NaN (not JSON)" in str(caught[0].message)


@pytest.mark.parametrize("name", list(BAD_NUMBERS))
def test_a_write_onto_a_bad_number_keeps_the_others(store_path, h200, name):
    _store_with_a_bad_number(store_path, h200, BAD_NUMBERS[name])
    with store_warnings() as caught:
        total = Store(store_path).merge([entry(h200, Bucket("bfloat16", False, 64, 1, 512, 512), cfg(64, 64, 4, 2))])
    assert total == 3  # the two good entries and the new one
    assert not list(store_path.parent.glob("configs.json.corrupt.*"))
    (aside,) = store_path.parent.glob("configs.json.dropped.*")
    assert json.loads(aside.read_text())[0]["median_ms"] == BAD_NUMBERS[name]  # as written, for a person
    assert len(caught) == 1 and "1 unusable entries dropped from the file by this write" in str(caught[0].message)
    with store_warnings() as caught:
        assert len(read_snapshot(store_path)) == 3
    assert not caught


def test_a_bad_number_outside_the_entries_is_still_the_whole_file(store_path, h200):
    _store_with_a_bad_number(store_path, h200, "9" * 5000, '"version": 2')
    with store_warnings() as caught:
        assert len(read_snapshot(store_path)) == 0
    assert len(caught) == 1 and "format version is an integer of 5000 digits" in str(caught[0].message)
