"""The decode kernel (split-KV, grouped heads packed) against the float32 reference, its
per-sequence lengths, its workspace, its default split count and its bad inputs.

CPU interpreter, fp16/fp32 (the interpreter's bf16 dot is broken); bf16 and the issue's
long shapes are in tests/gpu/test_decode_gpu.py.
"""

import pytest
import torch

from flashtune.kernels import Config, flash_attention
from flashtune.kernels.decode import DecodeWorkspace, choose_num_splits, launch_decode
from flashtune.kernels.reference import reference_attention, relative_error

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter suite; tests/gpu covers the GPU")

TOL = {torch.float16: 5e-3, torch.float32: 1e-4}


def _decode(num_splits, block_n=32, warps=4, stages=2, loads="pointer"):
    return Config(kernel="decode", BLOCK_N=block_n, num_splits=num_splits, num_warps=warps, num_stages=stages,
                  loads=loads)


def _qkv(b, hq, hkv, nq, nk, d, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, hq, nq, d, generator=g).to(dtype), torch.randn(b, hkv, nk, d, generator=g).to(dtype),
            torch.randn(b, hkv, nk, d, generator=g).to(dtype))


def _reference(q, k, v, causal, lengths=None):
    """The float32 reference; with per-sequence lengths, each sequence on its own keys."""
    if lengths is None:
        return reference_attention(q, k, v, causal=causal)
    ref = torch.zeros(q.shape, dtype=torch.float32)
    for b, n in enumerate(lengths):
        if n:
            ref[b:b + 1] = reference_attention(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], causal=causal)
    return ref


def _check(q, k, v, causal, config, lengths=None):
    seqlens = None if lengths is None else torch.tensor(lengths, dtype=torch.int32)
    out = flash_attention(q, k, v, causal=causal, config=config, cache_seqlens=seqlens)
    assert out.shape == q.shape and out.dtype == q.dtype
    err = relative_error(out, _reference(q, k, v, causal, lengths))
    assert err < TOL[q.dtype], f"relative error {err:.2e} for {config}"
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("num_splits", [1, 2, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_q_len_1(dtype, num_splits, causal):
    # 8/2: the 32/8 ratio of the rows; 77 keys end inside a tile.
    _check(*_qkv(2, 8, 2, 1, 77, 32, dtype), causal, _decode(num_splits))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hq,hkv", [(4, 1), (8, 2), (4, 4)])
def test_q_len_4_grouped_multi_query_and_multi_head(hq, hkv, causal):
    _check(*_qkv(1, hq, hkv, 4, 77, 64), causal, _decode(2, block_n=16))


def test_tma_loads_match_pointer_loads():
    q, k, v = _qkv(2, 8, 2, 1, 77, 32)
    pointer = flash_attention(q, k, v, causal=True, config=_decode(2))
    tma = flash_attention(q, k, v, causal=True, config=_decode(2, loads="tma"))
    torch.testing.assert_close(tma, pointer, atol=0, rtol=0)


@pytest.mark.parametrize("num_splits", [1, 4, 16])
def test_one_key_and_more_splits_than_tiles(num_splits):
    # kv_len 1: one partial tile; 16 splits leave all but one empty (they write -inf sums).
    _check(*_qkv(2, 4, 1, 1, 1, 32), False, _decode(num_splits))


def test_packed_rows_past_one_tile_take_several_row_blocks():
    # 32 heads on 1 KV head x 4 queries = 128 rows: two row blocks of DECODE_MAX_BLOCK_H.
    _check(*_qkv(1, 32, 1, 4, 40, 32), True, _decode(2))


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
def test_longer_cache_head_dim_128(causal):
    _check(*_qkv(1, 8, 2, 1, 300, 128), causal, _decode(8, block_n=64))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_splits,loads", [(1, "pointer"), (4, "pointer"), (4, "tma")])
def test_per_sequence_lengths_including_0_and_1(causal, num_splits, loads):
    q, k, v = _qkv(4, 4, 1, 2, 70, 32)
    out = _check(q, k, v, causal, _decode(num_splits, block_n=16, loads=loads), lengths=[0, 1, 33, 70])
    assert torch.count_nonzero(out[0]) == 0  # an empty cache attends to nothing
    # q_len 2 causal at length 1: the first query sees no key (zeros), the second key 0.
    if causal:
        assert torch.count_nonzero(out[1, :, 0]) == 0
        torch.testing.assert_close(out[1, :, 1], v[1, :, 0].expand_as(out[1, :, 1]))


def test_lengths_equal_to_the_capacity_match_no_lengths():
    q, k, v = _qkv(2, 4, 2, 1, 50, 32)
    cfg = _decode(2)
    full = flash_attention(q, k, v, config=cfg)
    same = flash_attention(q, k, v, config=cfg, cache_seqlens=torch.tensor([50, 50], dtype=torch.int32))
    assert torch.equal(full, same)


def test_default_config_picks_the_decode_kernel_for_short_queries():
    q, k, v = _qkv(1, 4, 2, 3, 77, 32)
    _check(q, k, v, True, None)
    _check(q, k, v, False, None, lengths=[60])


def test_decode_config_serves_a_long_query_against_a_cache():
    # Past DECODE_MAX_Q_LEN the default is prefill (with cache_seqlens too), but an explicit
    # decode config still runs the decode kernel, which is correct for any q_len.
    _check(*_qkv(1, 2, 1, 20, 40, 32), True, _decode(2, block_n=16))
    _check(*_qkv(1, 2, 1, 20, 40, 32), True, None, lengths=[33])


def test_workspace_is_reused_and_checked():
    q, k, v = _qkv(1, 4, 2, 1, 64, 32)
    ws = DecodeWorkspace.for_query(q, num_splits=4)
    out = torch.empty_like(q)
    launch_decode(q, k, v, out, causal=False, scale=32 ** -0.5, config=_decode(4), workspace=ws)
    assert relative_error(out, reference_attention(q, k, v)) < TOL[q.dtype]
    with pytest.raises(ValueError, match="workspace"):
        launch_decode(q, k, v, out, causal=False, scale=1.0, config=_decode(8), workspace=ws)


def test_split_count_rule():
    # Powers of two up to about 2 programs per SM (90 %: 256 programs count on 132 SMs) ...
    assert choose_num_splits(programs=8, kv_len=131072, sm_count=132) == 32
    assert choose_num_splits(programs=32, kv_len=32768, sm_count=132) == 8
    assert choose_num_splits(programs=256, kv_len=4096, sm_count=132) == 1
    # ... 4 x more with per-sequence lengths (the longest sequence sets the time) ...
    assert choose_num_splits(programs=64, kv_len=8192, sm_count=132, per_sequence_lengths=True) == 16
    # ... never below MIN_KEYS_PER_SPLIT keys a split, nor past the space's largest.
    assert choose_num_splits(programs=8, kv_len=1024, sm_count=132) == 8
    assert choose_num_splits(programs=8, kv_len=200, sm_count=132) == 1
    assert choose_num_splits(programs=1, kv_len=1 << 22, sm_count=1000) == 128


def test_default_config_follows_the_shape():
    from flashtune.kernels.decode import default_decode_config

    def default(b, hq, hkv, n, d, **kw):
        return default_decode_config(torch.empty(b, hq, 1, d), torch.empty(b, hkv, n, d), **kw)

    # The interpreter assumes 4 SMs: 8 programs already fill them twice.
    assert default(1, 32, 8, 4096, 128) == _decode(1, block_n=64, stages=2).replace(combine="fused")
    assert default(1, 4, 1, 4096, 128) == _decode(8, block_n=64, stages=3).replace(combine="fused")
    assert default(1, 4, 1, 4096, 64)["BLOCK_N"] == 128 and default(1, 4, 1, 4096, 256)["BLOCK_N"] == 32
    # Per-sequence lengths: more splits, and in a long cache the launched combine (the fused
    # one was slower there: its last split waits for the longest sequence), except for a
    # single sequence; up to FUSED_WITH_LENGTHS_MAX_KEYS the one launch.
    with_lengths = default(2, 4, 1, 8192, 128, per_sequence_lengths=True)
    assert with_lengths["num_splits"] == 16 and with_lengths["combine"] == "launch"
    assert default(2, 4, 1, 4096, 128, per_sequence_lengths=True)["combine"] == "fused"
    one = default(1, 4, 1, 4096, 128, per_sequence_lengths=True)
    assert one["num_splits"] == 32 and one["combine"] == "fused"


def _bad(lengths_or_tensor, q_shape=(2, 4, 1, 32), capacity=16):
    q = torch.randn(*q_shape).half()
    k = torch.randn(q_shape[0], 2, capacity, 32).half()
    flash_attention(q, k, k, cache_seqlens=lengths_or_tensor)


@pytest.mark.parametrize(
    "seqlens,match",
    [
        (torch.tensor([3, 4], dtype=torch.int64), "cache_seqlens.dtype must be torch.int32"),
        (torch.tensor([3, 4, 5], dtype=torch.int32), r"cache_seqlens must have shape \(batch,\) = \(2,\)"),
        (torch.tensor([[3, 4]], dtype=torch.int32), "cache_seqlens must have shape"),
        (torch.tensor([3, -1], dtype=torch.int32), "cache_seqlens must be >= 0"),
        (torch.tensor([3, 17], dtype=torch.int32), "cache_seqlens: a length of 17 is longer than the cache"),
        (torch.empty(2, dtype=torch.int32, device="meta"), "cache_seqlens must be on q's device"),
        ([3, 4], "cache_seqlens must be a torch.Tensor"),
    ],
)
def test_bad_cache_seqlens(seqlens, match):
    with pytest.raises(ValueError, match=match):
        _bad(seqlens)


def test_prefill_config_with_cache_seqlens_runs_the_prefill_kernel():
    # The prefill kernel takes per-sequence lengths too (a static cache's prefill).
    prefill = Config(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2)
    _check(*_qkv(2, 2, 2, 1, 40, 32), True, prefill, lengths=[4, 33])


def _fused(q, k, v, causal, config, lengths=None, workspace=None):
    out = torch.empty_like(q)
    seqlens = None if lengths is None else torch.tensor(lengths, dtype=torch.int32)
    launch_decode(q, k, v, out, causal=causal, scale=q.shape[-1] ** -0.5, config=config, cache_seqlens=seqlens,
                  workspace=workspace, combine="fused")
    err = relative_error(out, _reference(q, k, v, causal, lengths))
    assert err < TOL[q.dtype], f"relative error {err:.2e} for {config} (fused combine)"
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_splits,loads", [(2, "pointer"), (4, "pointer"), (4, "tma")])
def test_fused_combine_matches_the_reference(causal, num_splits, loads):
    # GQA 8/2, q_len 3 (speculative decoding), ragged lengths with an empty sequence and
    # more splits than some sequences have tiles.
    q, k, v = _qkv(3, 8, 2, 3, 90, 32)
    out = _fused(q, k, v, causal, _decode(num_splits, block_n=16, loads=loads), lengths=[0, 17, 90])
    assert torch.count_nonzero(out[0]) == 0


def test_fused_combine_over_several_row_blocks_and_the_launched_combine_agree():
    # 32 heads on 1 KV head x q_len 4: 128 packed rows, two row blocks of 64 (two counters).
    q, k, v = _qkv(1, 32, 1, 4, 70, 16, dtype=torch.float32)
    fused = _fused(q, k, v, True, _decode(4, block_n=16))
    launched = torch.empty_like(q)
    launch_decode(q, k, v, launched, causal=True, scale=16 ** -0.5, config=_decode(4, block_n=16))
    torch.testing.assert_close(fused, launched, rtol=1e-5, atol=1e-6)


def test_fused_combine_leaves_its_counters_at_zero_for_the_next_call():
    # Reused as a CUDA graph reuses it: the same workspace, call after call.
    q, k, v = _qkv(2, 4, 2, 1, 64, 32)
    ws = DecodeWorkspace.for_query(q, num_splits=8)
    for seed, splits in ((1, 8), (2, 8), (3, 2)):
        q, k, v = _qkv(2, 4, 2, 1, 64, 32, seed=seed)
        _fused(q, k, v, False, _decode(splits, block_n=16), workspace=ws)
        assert torch.count_nonzero(ws.counters) == 0


def test_unknown_combine_is_refused():
    q, k, v = _qkv(1, 4, 2, 1, 64, 32)
    with pytest.raises(ValueError, match="combine='late'"):
        launch_decode(q, k, v, torch.empty_like(q), causal=False, scale=1.0, config=_decode(2), combine="late")
