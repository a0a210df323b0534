"""Store writes: merged, atomic, refusing to downgrade; export of the best measurements."""

from __future__ import annotations

import json
import math

import pytest
from runtime_helpers import cfg, entry, store_warnings

from flashtune.kernels.source_hash import kernel_source_hash
from flashtune.objectives.types import Measurement, Status, Workload
from flashtune.runtime.storage.buckets import Bucket
from flashtune.runtime.storage.export import export_best
from flashtune.runtime.storage.store import Store, read_snapshot, triton_version

B1 = Bucket("bfloat16", False, 128, 1, 4096, 4096)
B2 = Bucket("bfloat16", True, 128, 1, 4096, 4096)


def test_merge_keeps_the_faster_entry_per_key(store_path, h200):
    store = Store(store_path)
    store.merge([entry(h200, B1, cfg(128, 64, 8, 3), 2.0)])
    store.merge([entry(h200, B1, cfg(256, 64, 8, 3), 1.5), entry(h200, B2, cfg(128, 64, 8, 3), 3.0)])
    store.merge([entry(h200, B1, cfg(64, 64, 4, 3), 9.0)])  # slower: ignored
    snap = store.snapshot()
    key = (h200.fingerprint, kernel_source_hash(), triton_version())
    assert len(snap) == 2
    assert snap.exact(key, B1).config == cfg(256, 64, 8, 3)
    store.merge([entry(h200, B1, cfg(64, 64, 4, 3), 9.0)], policy="replace")
    assert store.snapshot().exact(key, B1).config == cfg(64, 64, 4, 3)


def test_written_file_is_sorted_json_and_leaves_no_temporaries(store_path, h200):
    store = Store(store_path)
    store.merge([entry(h200, B2, cfg(128, 64, 8, 3)), entry(h200, B1, cfg(128, 64, 8, 3))])
    doc = json.loads(store_path.read_text())
    assert doc["format"] == "flashtune.configs" and doc["version"] == 2
    assert [e["bucket"]["causal"] for e in doc["entries"]] == [False, True]
    leftovers = {p.name for p in store_path.parent.iterdir()} - {"configs.json", "configs.json.lock"}
    assert not leftovers


def test_writer_moves_a_corrupt_file_aside_and_refuses_a_newer_format(store_path, h200):
    store_path.write_text("{ not json")
    with store_warnings() as caught:
        Store(store_path).merge([entry(h200, B1, cfg(128, 64, 8, 3))])
    assert len(caught) == 1
    assert len(read_snapshot(store_path)) == 1
    assert any(p.name.startswith("configs.json.corrupt.") for p in store_path.parent.iterdir())
    store_path.write_text(json.dumps({"format": "flashtune.configs", "version": 4, "entries": []}))
    with pytest.raises(ValueError, match="format version 4"):
        Store(store_path).merge([entry(h200, B1, cfg(128, 64, 8, 3))])


def test_snapshot_rereads_only_when_the_file_changes(store_path, h200):
    store = Store(store_path)
    assert len(store.snapshot()) == 0
    store.merge([entry(h200, B1, cfg(128, 64, 8, 3))])
    first = store.snapshot()
    assert len(first) == 1 and store.snapshot() is first


def test_bad_arguments_name_themselves(store_path, h200):
    with pytest.raises(TypeError, match="path"):
        Store(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="policy"):
        Store(store_path).merge([], policy="newest")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"entries\[0\]"):
        Store(store_path).merge([{"config": {}}])  # type: ignore[list-item]


def _m(config, workload, ms, **kw) -> Measurement:
    values = {"config": config, "workload": workload, "status": Status.OK, "median_ms": ms,
              "fingerprint": "00112233445566ff", "hardware": "NVIDIA H200", "tflops": 100.0}
    values.update(kw)
    return Measurement(**values)


def test_export_best_keeps_the_fastest_success_per_bucket(store_path):
    w4k = Workload(4, 32, 32, 4096, 4096, 128, "bfloat16", False)
    w3k = Workload(4, 32, 32, 3000, 3000, 128, "bfloat16", False)  # same bucket as 4k (and batch x heads)
    w1k = Workload(4, 32, 32, 1024, 1024, 128, "bfloat16", False)
    measurements = [
        _m(cfg(128, 64, 8, 3), w4k, 2.0),
        _m(cfg(256, 64, 8, 3), w3k, 1.0),
        _m(cfg(64, 64, 4, 3), w4k, 0.1, status=Status.WRONG_RESULT),  # fast and wrong
        _m(cfg(64, 32, 4, 3), w4k, 0.2, source="prior"),  # a hint, not a result
        _m(cfg(64, 32, 4, 3), w4k, 0.2, fingerprint=""),  # unknown GPU
        _m(cfg(128, 64, 8, 2), w1k, 0.5, versions={"triton": "3.5.0", "kernel_hash": "abcdef0123456789"}),
    ]
    assert export_best(measurements, store_path) == 2
    entries = {(e.bucket.q_len, e.triton): e for e in read_snapshot(store_path).entries()}
    assert entries[(4096, triton_version())].config == cfg(256, 64, 8, 3)
    assert entries[(4096, triton_version())].kernel_hash == kernel_source_hash()
    assert entries[(1024, "3.5.0")].kernel_hash == "abcdef0123456789"
    assert math.isclose(entries[(1024, "3.5.0")].tflops, 100.0)


def test_export_best_rejects_non_measurements(store_path):
    with pytest.raises(TypeError, match=r"measurements\[1\]"):
        export_best([_m(cfg(128, 64, 8, 3), Workload(1, 1, 1, 64, 64, 64), 1.0), {"config": {}}], store_path)


@pytest.mark.skipif("use_fp8" not in __import__("flashtune.kernels.space", fromlist=["TUNABLES"]).TUNABLES,
                    reason="the kernel declares no use_fp8 tunable")
def test_export_best_leaves_fp8_out_unless_asked(tmp_path):
    w = Workload(4, 32, 32, 4096, 4096, 128, "bfloat16", False)
    fp8, full = cfg(128, 64, 8, 3).replace(use_fp8=True), cfg(128, 64, 8, 3)
    measurements = [_m(fp8, w, 1.0), _m(full, w, 2.0)]
    export_best(measurements, tmp_path / "a.json")
    assert [e.config for e in read_snapshot(tmp_path / "a.json").entries()] == [full]
    export_best(measurements, tmp_path / "b.json", include_fp8=True)
    assert [e.config for e in read_snapshot(tmp_path / "b.json").entries()] == [fp8]


def test_store_baselines_and_export_import_without_torch():
    import subprocess
    import sys

    code = (
        "import sys, flashtune.runtime.storage.store, flashtune.runtime.dispatching.baselines, flashtune.runtime.storage.export, "
        "flashtune.runtime.dispatching.resolve, flashtune.runtime.retuning.monitor; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_written_files_validate_against_the_documented_schema(store_path, h200):
    import jsonschema

    from flashtune.runtime.storage.store_schema import STORE_SCHEMA

    Store(store_path).merge([entry(h200, B1, cfg(128, 64, 8, 3), 1.5, tflops=400.0), entry(h200, B2, cfg(64, 64, 4, 3), None)])
    jsonschema.validate(json.loads(store_path.read_text()), STORE_SCHEMA)


def test_entries_are_validated_per_gpu_when_first_looked_up(store_path, h200):
    """A broken entry of another GPU never costs this GPU a warning or its entries."""
    Store(store_path).merge([entry(h200, B1, cfg(128, 64, 8, 3))])
    doc = json.loads(store_path.read_text())
    broken = json.loads(json.dumps(doc["entries"][0]))
    broken["fingerprint"], broken["config"]["BLOCK_M"] = "ffffffffffffffff", "huge"
    doc["entries"].append(broken)
    store_path.write_text(json.dumps(doc))
    key = (h200.fingerprint, kernel_source_hash(), triton_version())
    with store_warnings() as caught:
        snap = read_snapshot(store_path)
        assert snap.exact(key, B1).config == cfg(128, 64, 8, 3)
    assert not caught
    with store_warnings() as caught:
        assert len(snap) == 1  # validating everything finds the broken one: one warning
    assert len(caught) == 1 and "entries/1" in str(caught[0].message) and "BLOCK_M" in str(caught[0].message)


def test_format_1_file_is_served_as_prefill_and_rewritten_as_format_2(store_path, h200):
    old = entry(h200, Bucket("bfloat16", True, 128, 4, 1, 4096), cfg(128, 64, 8, 3)).to_dict()
    old["bucket"].pop("kind")  # what a format-1 writer wrote
    store_path.write_text(json.dumps({"format": "flashtune.configs", "version": 1, "entries": [old]}))
    key = (h200.fingerprint, kernel_source_hash(), triton_version())
    snap = read_snapshot(store_path)
    prefill_any = Bucket("bfloat16", True, 128, 4, 1, 4096, "prefill", 8)
    assert snap.exact(key, prefill_any).config == cfg(128, 64, 8, 3)  # any batch x heads: an exact hit
    assert snap.exact(key, Bucket("bfloat16", True, 128, 4, 1, 4096, "decode", 8)) is None
    assert list(snap.nearest(key, Bucket("bfloat16", True, 128, 4, 1, 2048, "decode", 8))) == []
    Store(store_path).merge([entry(h200, B1, cfg(256, 64, 8, 3))])
    doc = json.loads(store_path.read_text())
    assert doc["version"] == 2 and len(doc["entries"]) == 2
    assert {e["bucket"]["kind"] for e in doc["entries"]} == {"prefill"}
