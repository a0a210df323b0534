"""Per-sequence key ranges (``cache_seqlens`` and ``kv_start``) in the prefill and decode
kernels against the float32 reference on each sequence's own keys, and their bad values.

A range [kv_start[b], cache_seqlens[b]) is what a static cache (filled length) and left
padding (first real key) give a model: causal is aligned bottom-right against its end.
CPU interpreter, fp16/fp32; bf16 is in tests/gpu/test_serving_gpu.py.
"""

import pytest
import torch

from flashtune.kernels import Config, flash_attention
from flashtune.kernels.reference import reference_attention, relative_error

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter suite; tests/gpu covers the GPU")

TOL = {torch.float16: 5e-3, torch.float32: 1e-4}
PREFILL = Config(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2)
DECODE = Config(kernel="decode", BLOCK_N=32, num_splits=4, num_warps=4, num_stages=2, loads="pointer")


def _qkv(b, hq, hkv, nq, nk, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=g).to(dtype) for h, n in ((hq, nq), (hkv, nk), (hkv, nk)))


def _reference(q, k, v, causal, starts, ends):
    ref = torch.zeros(q.shape, dtype=torch.float32)
    for b, (s, e) in enumerate(zip(starts, ends)):
        if e > s:
            ref[b:b + 1] = reference_attention(q[b:b + 1], k[b:b + 1, :, s:e], v[b:b + 1, :, s:e], causal=causal)
    return ref


def _ranges(starts, ends):
    return torch.tensor(starts, dtype=torch.int32), torch.tensor(ends, dtype=torch.int32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("q_len,config", [(1, DECODE), (3, None), (37, PREFILL), (37, None), (20, DECODE)])
def test_key_ranges_match_each_sequence_alone(dtype, causal, q_len, config):
    # GQA 4/2, odd ends (a ragged last tile), starts off a tile boundary, one sequence whole.
    q, k, v = _qkv(3, 4, 2, q_len, 75, 32, dtype)
    starts, ends = [0, 7, 33], [75, 61, 75]
    out = flash_attention(q, k, v, causal=causal, config=config, cache_seqlens=_ranges(starts, ends)[1],
                          kv_start=_ranges(starts, ends)[0])
    err = relative_error(out, _reference(q, k, v, causal, starts, ends))
    assert err < TOL[dtype], f"relative error {err:.2e}"


def test_kv_start_alone_ends_at_the_capacity_and_empty_ranges_write_zeros():
    q, k, v = _qkv(2, 2, 1, 40, 40, 32, torch.float32)
    starts = torch.tensor([5, 40], dtype=torch.int32)  # the second sequence has no key at all
    out = flash_attention(q, k, v, causal=True, config=PREFILL, kv_start=starts)
    assert relative_error(out, _reference(q, k, v, True, [5, 40], [40, 40])) < 1e-4
    assert torch.count_nonzero(out[1]) == 0
    # Left padding: query rows before the first real key see nothing and write zeros.
    assert torch.count_nonzero(out[0, :, :5]) == 0


def test_full_ranges_equal_no_ranges():
    q, k, v = _qkv(2, 4, 2, 33, 50, 32, torch.float32)
    plain = flash_attention(q, k, v, causal=True, config=PREFILL)
    ranged = flash_attention(q, k, v, causal=True, config=PREFILL, kv_start=torch.zeros(2, dtype=torch.int32),
                             cache_seqlens=torch.full((2,), 50, dtype=torch.int32))
    assert torch.equal(plain, ranged)


@pytest.mark.parametrize(
    "starts,ends,match",
    [
        ([0, -1], [8, 8], r"kv_start\[1\] = -1 is outside \[0, 8\]"),
        ([0, 6], [8, 5], r"kv_start\[1\] = 6 is outside \[0, 5\]"),
        ([0, 0, 0], [8, 8], r"kv_start must have shape \(batch,\) = \(2,\)"),
        ([0, 0], [8, 9], "cache_seqlens: a length of 9 is longer than the cache"),
        ([0, 0], [-2, 8], "cache_seqlens must be >= 0"),
        ([0, 0], [8, 8, 8], r"cache_seqlens must have shape \(batch,\) = \(2,\)"),
    ],
)
def test_bad_ranges_name_the_argument(starts, ends, match):
    q, k, v = _qkv(2, 2, 2, 1, 8, 32, torch.float32)
    with pytest.raises(ValueError, match=match):
        flash_attention(q, k, v, causal=True, cache_seqlens=torch.tensor(ends, dtype=torch.int32),
                        kv_start=torch.tensor(starts, dtype=torch.int32))


def test_kv_start_of_the_wrong_dtype_names_it():
    q, k, v = _qkv(1, 2, 2, 1, 8, 32, torch.float32)
    with pytest.raises(ValueError, match="kv_start.dtype must be torch.int32"):
        flash_attention(q, k, v, kv_start=torch.tensor([1]))


def test_fp8_prefill_config_refuses_ranges():
    q, k, v = _qkv(1, 2, 2, 20, 20, 32, torch.float16)
    fp8 = Config(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2, use_fp8=True)
    with pytest.raises(ValueError, match="cache_seqlens/kv_start need the decode kernel or a prefill config"):
        flash_attention(q, k, v, config=fp8, cache_seqlens=torch.tensor([4], dtype=torch.int32))
