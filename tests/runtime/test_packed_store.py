"""The store's varlen and paged classes: entries served to the packed ops (and only to them),
invalid ones skipped with one warning, old store files still read, the format version.

Real store files in tmp_path, a simulated H200, the kernels in Triton's interpreter at tiny shapes.
"""

from __future__ import annotations

import json

import pytest
import sanitizer_fake
import torch
from runtime_helpers import cfg, entry, store_warnings

import flashtune.runtime as runtime
from flashtune.experiments.cli.main import main
from flashtune.kernels.config import Config
from flashtune.kernels.paged import default_paged_config
from flashtune.kernels.paged import flash_attention_with_kvcache as paged_kernel
from flashtune.kernels.source_hash import kernel_source_hash, packed_source_hash
from flashtune.kernels.space import VARLEN_DEFAULT, validate_config
from flashtune.kernels.varlen import flash_attention_varlen as varlen_kernel
from flashtune.objectives.hardware import known_specs
from flashtune.objectives.types import Measurement, Status, Workload
from flashtune.runtime.dispatching import packed
from flashtune.runtime.dispatching.baselines import VARLEN_ARCH_TILES
from flashtune.runtime.storage.buckets import Bucket, distance
from flashtune.runtime.storage.export import export_best
from flashtune.runtime.storage.sanitized import screen_entries
from flashtune.runtime.storage.store import Store, read_snapshot, source_hash_of

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter suite")

HQ, HKV, D = 4, 2, 32
Q_LENS, K_LENS = [5, 17], [9, 17]  # longest 17 / 17: bucket q32 k32; 2 sequences x 2 KV heads: bh4
VARLEN = Bucket.of_shape(kind="varlen", dtype="float32", causal=True, head_dim=D, q_heads=HQ, kv_heads=HKV,
                         q_len=17, kv_len=17, batch=2)
#: What the varlen op runs on Hopper without a store entry.
HOPPER_TILE = VARLEN_ARCH_TILES["sm90"]
TILE = Config(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=1)  # not VARLEN_DEFAULT
PAGE = 16
PAGED_TILE = Config(BLOCK_N=32, num_splits=2, num_warps=2, num_stages=1)


def _cumulative(lengths):
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32)


def _varlen_inputs(q_lens=Q_LENS, k_lens=K_LENS):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(sum(q_lens), HQ, D, generator=g)
    k = torch.randn(sum(k_lens), HKV, D, generator=g)
    v = torch.randn(sum(k_lens), HKV, D, generator=g)
    return q, k, v, _cumulative(q_lens), _cumulative(k_lens), max(q_lens), max(k_lens)


def _paged_inputs(lengths=(3, 20), page=PAGE, pages_per_seq=2):
    """Two sequences of ``lengths`` cached keys in a pool of pages, q_len 1; capacity
    pages_per_seq x page."""
    g = torch.Generator().manual_seed(1)
    batch = len(lengths)
    pool = batch * pages_per_seq + 1
    k_cache = torch.randn(pool, page, HKV, D, generator=g)
    v_cache = torch.randn(pool, page, HKV, D, generator=g)
    table = torch.arange(batch * pages_per_seq, dtype=torch.int32).reshape(batch, pages_per_seq)
    q = torch.randn(batch, 1, HQ, D, generator=g)
    return q, k_cache, v_cache, torch.tensor(lengths, dtype=torch.int32), table


def _paged_bucket(page=PAGE, capacity=2 * PAGE):
    return Bucket.of_shape(kind="paged", dtype="float32", causal=True, head_dim=D, q_heads=HQ, kv_heads=HKV,
                           q_len=1, kv_len=capacity, batch=2, page_size=page)


@pytest.fixture
def serving(store_path, h200):
    """The process's dispatcher on the tmp store, simulating an H200."""
    runtime.set_store(store_path)
    runtime.set_hardware(h200)
    yield store_path
    runtime.set_hardware(None)


@pytest.fixture
def launched(monkeypatch):
    """The configs the packed ops hand their kernels (which still run)."""
    configs = []

    def varlen(*args, config=None, **kw):
        configs.append(config)
        return varlen_kernel(*args, config=config, **kw)

    def paged(*args, config=None, **kw):
        configs.append(config)
        return paged_kernel(*args, config=config, **kw)

    monkeypatch.setattr(packed, "_varlen_launcher", varlen)
    monkeypatch.setattr(packed, "_paged_launcher", paged)
    return configs


def _raw_store(path, entries, version=3):
    path.write_text(json.dumps({"format": "flashtune.configs", "version": version, "entries": entries}))


def _raw_entry(h200, bucket: dict, config: dict, median_ms=1.0, **fields):
    e = entry(h200, Bucket("float32", True, D, 2, 32, 32), cfg(64, 32, 4, 2)).to_dict()
    kernel_hash = source_hash_of(bucket.get("kind", "prefill"))
    return {**e, "bucket": bucket, "config": config, "median_ms": median_ms, "kernel_hash": kernel_hash, **fields}


# --- buckets -------------------------------------------------------------------------------


def test_the_classes_never_share_and_pages_are_exact():
    dense = Bucket("float32", True, D, 2, 32, 32, "prefill", 4)
    assert distance(VARLEN, dense) is None and distance(dense, VARLEN) is None
    assert (VARLEN.q_len, VARLEN.kv_len, VARLEN.batch_kv_heads, VARLEN.gqa) == (32, 32, 4, 2)
    decode = Bucket("float32", True, D, 2, 1, 32, "decode", 4)
    assert distance(_paged_bucket(), decode) is None
    assert distance(_paged_bucket(16), _paged_bucket(32)) is None
    assert distance(_paged_bucket(), _paged_bucket(capacity=4 * PAGE)) == 1
    assert _paged_bucket().name.endswith("_paged_p16") and VARLEN.name.endswith("_varlen")
    assert Bucket.from_dict(_paged_bucket().to_dict()) == _paged_bucket()
    with pytest.raises(ValueError, match="page_size"):
        Bucket("float32", True, D, 2, 1, 32, "decode", 4, 16)
    with pytest.raises(ValueError, match="page_size"):
        Bucket("float32", True, D, 2, 1, 32, "paged", 4)


# --- varlen --------------------------------------------------------------------------------


def test_a_varlen_entry_serves_a_matching_call_and_its_tile_runs(serving, h200, launched):
    Store(serving).merge([entry(h200, VARLEN, TILE)])
    q, k, v, cu_q, cu_k, max_q, max_k = _varlen_inputs()
    out = runtime.flash_attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
    assert launched == [TILE]
    expected = varlen_kernel(q, k, v, cu_q, cu_k, max_q, max_k, causal=True, config=VARLEN_DEFAULT)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    why = runtime.explain_varlen(q, k, cu_q, max_q, max_k, causal=True)
    assert (why.origin, why.config, why.bucket) == ("exact", TILE, VARLEN)
    assert "varlen" in why.detail and "exact store hit" in why.detail

    # Longer sequences (bucket 64): the nearest varlen bucket, never a default.
    q, k, v, cu_q, cu_k, max_q, max_k = _varlen_inputs([5, 40], [9, 40])
    why = runtime.explain_varlen(q, k, cu_q, max_q, max_k, causal=True)
    assert why.origin == "nearest" and why.config == TILE and VARLEN.name in why.detail


def test_the_bucket_comes_from_the_ints_passed_never_from_the_lengths(serving, h200):
    Store(serving).merge([entry(h200, VARLEN, TILE)])
    q, k, v, cu_q, cu_k, _, _ = _varlen_inputs()
    # The same tensors with a longer max_seqlen (a caller's padded bound): another bucket.
    assert runtime.explain_varlen(q, k, cu_q, 17, 17, causal=True).origin == "exact"
    assert runtime.explain_varlen(q, k, cu_q, 1000, 1000, causal=True).origin == "nearest"


def test_a_dense_prefill_entry_never_serves_varlen_nor_a_varlen_entry_dense(serving, h200, launched):
    dense = Bucket("float32", True, D, 2, 32, 32, "prefill", 4)
    Store(serving).merge([entry(h200, dense, cfg(32, 64, 4, 1))])
    q, k, v, cu_q, cu_k, max_q, max_k = _varlen_inputs()
    runtime.flash_attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
    assert launched == [HOPPER_TILE]
    why = runtime.explain_varlen(q, k, cu_q, max_q, max_k, causal=True)
    assert why.origin == "default" and why.config == HOPPER_TILE and "no store entry" in why.detail

    Store(serving).merge([entry(h200, VARLEN, TILE)])
    runtime.reload_store()
    q4, k4 = torch.zeros(2, HQ, 100, D), torch.zeros(2, HKV, 100, D)  # a dense call of VARLEN's fields
    dense_hit = runtime.explain(q4, k4, causal=True)
    assert dense_hit.origin == "nearest" and dense_hit.config == cfg(32, 64, 4, 1)  # the dense entry, at q128
    assert dense.name in dense_hit.detail and VARLEN.name not in dense_hit.detail


def test_without_an_entry_hopper_runs_its_measured_tile_and_other_gpus_the_safe_one(serving, h200, launched):
    q, k, v, cu_q, cu_k, max_q, max_k = _varlen_inputs()
    out = runtime.flash_attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
    why = runtime.explain_varlen(q, k, cu_q, max_q, max_k, causal=True)
    assert launched == [HOPPER_TILE] and HOPPER_TILE != VARLEN_DEFAULT
    assert why.origin == "default" and "sm90 varlen tile" in why.detail
    expected = varlen_kernel(q, k, v, cu_q, cu_k, max_q, max_k, causal=True, config=VARLEN_DEFAULT)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)  # another tile, the same attention

    q256, k256 = torch.zeros(q.shape[0], HQ, 256), torch.zeros(k.shape[0], HKV, 256)  # past the tile's head dims
    assert runtime.explain_varlen(q256, k256, cu_q, max_q, max_k, causal=True).config == VARLEN_DEFAULT

    runtime.set_hardware(known_specs()["a100"])  # an architecture without a measured tile
    runtime.flash_attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
    assert launched[-1] == VARLEN_DEFAULT
    assert "safe default" in runtime.explain_varlen(q, k, cu_q, max_q, max_k, causal=True).detail


def test_an_explicit_config_is_the_callers(serving, h200, launched):
    Store(serving).merge([entry(h200, VARLEN, TILE)])
    q, k, v, cu_q, cu_k, max_q, max_k = _varlen_inputs()
    runtime.flash_attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True, config=VARLEN_DEFAULT)
    assert launched == [VARLEN_DEFAULT]


def test_an_invalid_varlen_entry_is_skipped_with_one_warning(serving, h200):
    bucket = VARLEN.to_dict()
    _raw_store(serving, [
        _raw_entry(h200, bucket, {**TILE.to_dict(), "BLOCK_M": 48}),  # not in the space
        _raw_entry(h200, bucket, {**validate_config(cfg(32, 64, 4, 1)), "loads": "tma"}, 0.5),  # not this kernel
    ])
    q, k, v, cu_q, cu_k, max_q, max_k = _varlen_inputs()
    with store_warnings() as caught:
        first = runtime.explain_varlen(q, k, cu_q, max_q, max_k, causal=True)
        runtime.reload_store()
        again = runtime.explain_varlen(q, k, cu_q, max_q, max_k, causal=True)
    assert first.origin == again.origin == "default"
    assert len(caught) == 1
    assert "unusable entries skipped" in str(caught[0].message) and "(and 1 more)" in str(caught[0].message)


@pytest.mark.parametrize("served", ["store entry", "Hopper tile"])
def test_a_varlen_config_that_fails_to_launch_falls_back_once(serving, h200, monkeypatch, served):
    """A store entry, or Hopper's tile without one, that cannot launch: the safe tile, one warning."""
    bad = TILE if served == "store entry" else HOPPER_TILE
    if served == "store entry":
        Store(serving).merge([entry(h200, VARLEN, TILE)])
    tried = []

    def failing(*args, config=None, **kw):
        tried.append(config)
        if config == bad:
            raise RuntimeError("out of resources")
        return varlen_kernel(*args, config=config, **kw)

    monkeypatch.setattr(packed, "_varlen_launcher", failing)
    q, k, v, cu_q, cu_k, max_q, max_k = _varlen_inputs()
    with pytest.warns(RuntimeWarning, match="failed for"):
        runtime.flash_attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
    runtime.flash_attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
    assert tried == [bad, None, VARLEN_DEFAULT]
    why = runtime.explain_varlen(q, k, cu_q, max_q, max_k, causal=True)
    assert why.origin == "default" and "failed here" in why.detail


def test_bad_varlen_inputs_still_name_the_argument(serving):
    q, k, v, cu_q, cu_k, max_q, max_k = _varlen_inputs()
    with pytest.raises(ValueError, match="max_seqlen_q"):
        runtime.flash_attention_varlen(q, k, v, cu_q, cu_k, 3, max_k)
    with pytest.raises(ValueError, match="max_seqlen_k must be an int"):  # a tensor is never read for a bucket
        runtime.flash_attention_varlen(q, k, v, cu_q, cu_k, max_q, torch.tensor(max_k))


def test_no_gpu_spec_gets_the_default_without_reading_entries(store_path, h200):
    Store(store_path).merge([entry(h200, VARLEN, TILE)])
    runtime.set_store(store_path)  # no simulated GPU: the CPU
    q, k, v, cu_q, cu_k, max_q, max_k = _varlen_inputs()
    why = runtime.explain_varlen(q, k, cu_q, max_q, max_k, causal=True)
    assert why.origin == "default" and why.config == VARLEN_DEFAULT and "no GPU spec" in why.detail


# --- paged ---------------------------------------------------------------------------------


def test_a_paged_entry_serves_its_page_size_only(serving, h200, launched):
    Store(serving).merge([entry(h200, _paged_bucket(), PAGED_TILE)])
    q, k_cache, v_cache, lengths, table = _paged_inputs()
    out = runtime.flash_attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table)
    assert launched == [PAGED_TILE]
    expected = paged_kernel(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    why = runtime.explain_paged(q, k_cache, table)
    assert (why.origin, why.config, why.bucket) == ("exact", PAGED_TILE, _paged_bucket())

    # Pages of 32 (same capacity): no entry of that page size, the kernel's exact-shape default.
    q, k_cache, v_cache, lengths, table = _paged_inputs(page=32, pages_per_seq=1)
    runtime.flash_attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table)
    assert launched[-1] is None
    why = runtime.explain_paged(q, k_cache, table)
    default = default_paged_config(batch=2, q_heads=HQ, kv_heads=HKV, q_len=1, capacity=32, head_dim=D,
                                   device=q.device)
    assert why.origin == "default" and why.config == default and "paged kernel's default" in why.detail


def test_a_dense_decode_entry_never_serves_paged(serving, h200, launched):
    decode = Bucket("float32", True, D, 2, 1, 32, "decode", 4)
    config = validate_config({"kernel": "decode", **PAGED_TILE})
    Store(serving).merge([entry(h200, decode, config)])
    q, k_cache, v_cache, lengths, table = _paged_inputs()
    runtime.flash_attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table)
    assert launched == [None]
    assert runtime.explain_paged(q, k_cache, table).origin == "default"


def test_an_invalid_paged_entry_is_skipped_with_one_warning(serving, h200):
    _raw_store(serving, [_raw_entry(h200, _paged_bucket().to_dict(), {**PAGED_TILE.to_dict(), "num_splits": 3})])
    q, k_cache, v_cache, lengths, table = _paged_inputs()
    with store_warnings() as caught:
        assert runtime.explain_paged(q, k_cache, table).origin == "default"
        runtime.reload_store()
        assert runtime.explain_paged(q, k_cache, table).origin == "default"
    assert len(caught) == 1 and "num_splits=3" in str(caught[0].message)


# --- the file ------------------------------------------------------------------------------


def test_old_store_files_still_load_and_stay_format_2_until_a_packed_entry(serving, h200):
    dense = Bucket("float32", True, D, 2, 128, 128, "prefill", 4)
    # A version-2 file as the flashtune before these classes wrote it (no page_size anywhere).
    old = _raw_entry(h200, {k: v for k, v in dense.to_dict().items()}, cfg(32, 64, 4, 1).to_dict())
    _raw_store(serving, [old], version=2)
    q4, k4 = torch.zeros(2, HQ, 100, D), torch.zeros(2, HKV, 100, D)
    with store_warnings() as caught:
        assert runtime.explain(q4, k4, causal=True).origin == "exact"
    assert not caught

    Store(serving).merge([entry(h200, Bucket("float32", True, D, 2, 256, 256, "prefill", 4), cfg(64, 64, 4, 2))])
    assert json.loads(serving.read_text())["version"] == 2  # still readable by a format-2 flashtune
    Store(serving).merge([entry(h200, VARLEN, TILE), entry(h200, _paged_bucket(), PAGED_TILE)])
    doc = json.loads(serving.read_text())
    assert doc["version"] == 3 and len(doc["entries"]) == 4
    assert {e.bucket.kind for e in read_snapshot(serving).entries()} == {"prefill", "varlen", "paged"}
    paged = next(e for e in doc["entries"] if e["bucket"]["kind"] == "paged")
    assert paged["bucket"]["page_size"] == PAGE and paged["config"] == PAGED_TILE.to_dict()


# --- export --------------------------------------------------------------------------------


def _row(h200, config: dict, workload: Workload, median_ms: float) -> dict:
    return Measurement(config=Config(config), workload=workload, status=Status.OK, fingerprint=h200.fingerprint,
                       hardware=h200.name, median_ms=median_ms, source="measured").to_dict()


def test_export_writes_varlen_and_paged_rows_of_tables(tmp_path, h200, capsys):
    # Rows mark their class as decode rows do, by the config's kernel; a varlen row's workload
    # is (sequences, heads, longest q, longest k), a paged row's as a decode row's (kv_len the
    # block table's capacity) with the page size in its config.
    varlen_workload = Workload(2, HQ, HKV, 17, 17, D, "float32", True)
    paged_workload = Workload(2, HQ, HKV, 1, 2 * PAGE, D, "float32", True)
    varlen_table, paged_table = tmp_path / "varlen.jsonl", tmp_path / "paged.jsonl"
    varlen_table.write_text("".join(json.dumps(_row(h200, {"kernel": "varlen", **c}, varlen_workload, ms)) + "\n"
                                    for c, ms in ((TILE, 0.2), (VARLEN_DEFAULT, 0.3))))
    paged_table.write_text("".join(json.dumps(_row(h200, {"kernel": "paged", "page_size": PAGE, **c}, paged_workload,
                                                   ms)) + "\n"
                                   for c, ms in ((PAGED_TILE, 0.1), ({**PAGED_TILE, "num_splits": 1}, 0.4))))
    out = tmp_path / "store.json"
    assert main(["export", "--to", str(out), "--no-sanitize", f"table:{varlen_table}", f"table:{paged_table}"]) == 0
    by_bucket = {e.bucket: e for e in read_snapshot(out).entries()}
    assert by_bucket == {VARLEN: by_bucket[VARLEN], _paged_bucket(): by_bucket[_paged_bucket()]}
    assert by_bucket[VARLEN].config == TILE and by_bucket[_paged_bucket()].config == PAGED_TILE
    assert "_varlen" in capsys.readouterr().out


def test_a_paged_row_without_its_page_size_is_refused(h200):
    row = Measurement.from_dict(_row(h200, {"kernel": "paged", **PAGED_TILE},
                                     Workload(2, HQ, HKV, 1, 32, D, "float32", True), 0.1))
    with pytest.raises(ValueError, match="page_size"):
        export_best([row], "unused.json")


def test_the_sanitizer_checks_packed_entries_with_their_own_kernels(h200, tmp_path, monkeypatch):
    """A varlen and a paged entry reach the sanitizer as their kernels' rows (the paged one with
    its bucket's page size), and the real child runs those kernels' cases (the interpreter, under
    a fake compute-sanitizer that runs the command it is given)."""
    fake = sanitizer_fake.install(tmp_path / "bin", run_child=True)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("FLASHTUNE_SANITIZED", str(tmp_path / "sanitized.json"))
    entries = [entry(h200, VARLEN, TILE), entry(h200, _paged_bucket(), PAGED_TILE)]
    screening = screen_entries(entries, gpu=h200.to_dict(), sanitizer=str(fake), tools=("memcheck",))
    assert screening.kept == entries and screening.checked == 2 and screening.lines == []
    requests = [json.loads(argv[-1]) for argv in sanitizer_fake.calls(tmp_path / "bin")]
    configs = {r["config"]["kernel"]: r for request in requests for r in request.get("batch", [request])}
    assert configs.keys() == {"varlen", "paged"} and configs["paged"]["config"]["page_size"] == PAGE
    assert {c["layout"] for c in configs["varlen"]["cases"]} == {"varlen"}
    assert {c["page_size"] for c in configs["paged"]["cases"]} == {PAGE}


def test_a_paged_config_that_fails_to_launch_falls_back_to_the_exact_default(serving, h200, monkeypatch):
    Store(serving).merge([entry(h200, _paged_bucket(), PAGED_TILE)])

    def failing(*args, config=None, **kw):
        if config is not None:
            raise RuntimeError("out of resources")
        return paged_kernel(*args, config=config, **kw)

    monkeypatch.setattr(packed, "_paged_launcher", failing)
    q, k_cache, v_cache, lengths, table = _paged_inputs()
    with pytest.warns(RuntimeWarning, match="failed for"):
        runtime.flash_attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table)
    why = runtime.explain_paged(q, k_cache, table)
    assert why.origin == "default" and "failed here" in why.detail
    assert why.config == default_paged_config(batch=2, q_heads=HQ, kv_heads=HKV, q_len=1, capacity=2 * PAGE,
                                              head_dim=D, device=q.device)


def test_each_packed_class_has_its_own_kernel_hash(serving, h200):
    assert len({kernel_source_hash(), packed_source_hash("varlen"), packed_source_hash("paged")}) == 3
    # A varlen entry of an older varlen kernel: stale (one warning), not served; the dense op's
    # calls never count the packed entries as stale, nor the reverse.
    dense = Bucket("float32", True, D, 2, 128, 128, "prefill", 4)
    _raw_store(serving, [
        _raw_entry(h200, VARLEN.to_dict(), TILE.to_dict(), kernel_hash="0123456789abcdef"),
        _raw_entry(h200, _paged_bucket().to_dict(), PAGED_TILE.to_dict()),
        _raw_entry(h200, dense.to_dict(), cfg(32, 64, 4, 1).to_dict()),
    ])
    q4, k4 = torch.zeros(2, HQ, 100, D), torch.zeros(2, HKV, 100, D)
    q, k_cache, v_cache, lengths, table = _paged_inputs()
    with store_warnings() as caught:
        assert runtime.explain(q4, k4, causal=True).origin == "exact"
        assert runtime.explain_paged(q, k_cache, table).origin == "exact"
    assert not caught
    q, k, v, cu_q, cu_k, max_q, max_k = _varlen_inputs()
    with store_warnings() as caught:
        assert runtime.explain_varlen(q, k, cu_q, max_q, max_k, causal=True).origin == "default"
    assert len(caught) == 1 and "another kernel source" in str(caught[0].message)
    assert "1 entry" in str(caught[0].message)
