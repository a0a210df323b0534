"""The op's lean descriptor path (loads lean, lean_ws, lean_overlap): every loop, tile order
and grid against the float32 reference on ragged, causal, grouped-query, strided and fp8
inputs; and the kernel's lazy-rescaling switch (measured by bench_prefill, not in the space).

CPU interpreter in fp16/fp32 (its bf16 dot is broken); bf16 on the GPU is tests/gpu.
"""

import itertools

import pytest
import torch

from flashtune.kernels import Config, flash_attention
from flashtune.kernels.lean import FALLBACK_DESC, LeanVariant, flat_compatible, launch_lean, variant_for
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.objectives.bench import FP8_TOLERANCE

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter suite; tests/gpu covers the GPU")

TOL = {torch.float16: 5e-3, torch.float32: 1e-4}


def _config(**knobs) -> Config:
    base = dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2, loads="lean", use_fp8=False, grid="tiles",
                tile_order="head_major")
    return Config({**base, **knobs})


def _qkv(b, hq, hkv, nq, nk, d, dtype, seed=0, grow=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, nq, d, generator=g)
    k = torch.randn(b, hkv, nk, d, generator=g)
    v = torch.randn(b, hkv, nk, d, generator=g)
    if grow:  # keys grow along the sequence: row maxima keep rising, lazy rescaling must rescale
        k = k * torch.linspace(0.2, 6.0, nk)[None, None, :, None]
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _error(q, k, v, causal, config):
    out = flash_attention(q, k, v, causal=causal, config=config)
    return relative_error(out, reference_attention(q, k, v, causal=causal))


@pytest.mark.slow
@pytest.mark.parametrize("loads,grid,order", [
    ("lean", "tiles", "head_major"), ("lean_ws", "tiles", "head_major"), ("lean_overlap", "tiles", "head_major"),
    ("lean", "persistent", "head_major"), ("lean_overlap", "persistent", "longest_first"),
    ("lean_ws", "persistent", "longest_first"), ("lean", "tiles", "longest_first"),
])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_switches_on_ragged_causal_grouped_inputs(loads, grid, order, dtype):
    config = _config(loads=loads, grid=grid, tile_order=order)
    for (nq, nk), causal in itertools.product([(70, 135), (45, 37)], [False, True]):
        q, k, v = _qkv(2, 4, 2, nq, nk, 32, dtype, seed=nq)
        err = _error(q, k, v, causal, config)
        assert err < TOL[dtype], (nq, nk, causal, err)


@pytest.mark.parametrize("causal", [False, True])
def test_lazy_rescaling_is_exact_when_row_maxima_keep_growing(causal):
    q, k, v = _qkv(2, 4, 2, 70, 135, 32, torch.float32, seed=4, grow=True)
    out = torch.full_like(q, float("nan"))
    launch_lean(q, k, v, out, causal=causal, scale=32 ** -0.5, variant=LeanVariant(32, 32, 4, 2, lazy_rescale=True))
    assert relative_error(out, reference_attention(q, k, v, causal=causal)) < TOL[torch.float32]


@pytest.mark.parametrize("head_dim", [64, 128])
def test_tiles_wider_than_the_sequence(head_dim):
    q, k, v = _qkv(1, 2, 1, 20, 33, head_dim, torch.float16)
    for bm, bn in ((64, 64), (128, 32)):
        assert _error(q, k, v, True, _config(BLOCK_M=bm, BLOCK_N=bn, loads="lean_overlap")) < TOL[torch.float16]


def test_strided_inputs_take_the_fallback_descriptors():
    # (batch, seq, heads, dim) storage viewed as (batch, heads, seq, dim).
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 40, 4, 64, generator=g).to(torch.float16).transpose(1, 2)
    k, v = (torch.randn(2, 50, 2, 64, generator=g).to(torch.float16).transpose(1, 2) for _ in range(2))
    assert not flat_compatible(q)
    assert variant_for(_config(), q, k, v, torch.empty_like(q)).desc == FALLBACK_DESC
    assert _error(q, k, v, True, _config(loads="lean_overlap")) < TOL[torch.float16]
    contiguous = q.contiguous()
    assert variant_for(_config(), contiguous, k.contiguous(), v.contiguous(), contiguous).desc == "flat"


@pytest.mark.parametrize("loads", ["lean", "lean_overlap"])
def test_fp8_within_its_budget(loads):
    q, k, v = _qkv(1, 4, 2, 45, 70, 64, torch.float16, seed=11)
    for causal in (False, True):
        err = _error(q, k, v, causal, _config(use_fp8=True, loads=loads))
        assert 1e-3 < err < FP8_TOLERANCE  # really ran in fp8, and within its budget


def test_rows_that_see_no_key_are_zero():
    q, k, v = _qkv(1, 1, 1, 50, 10, 32, torch.float16)
    out = flash_attention(q, k, v, causal=True, config=_config(loads="lean_overlap"))
    assert torch.all(out[:, :, :40] == 0) and torch.isfinite(out).all()
