"""The Gluon kernel's bound launch (``kernels.gluon.BoundGluon``) on the CPU: what it binds once,
the arguments a call hands the compiled kernel and the specialization class that picks it. The
launch itself runs on the GPU (tests/gpu/test_serving_gpu.py: bit for bit the jit launch's)."""

import inspect

import pytest
import torch

from flashtune.kernels.gluon import _GLUON_KERNEL, BoundGluon, gluon_variant_for, launch_options
from flashtune.kernels.space import validate_config
from flashtune.runtime.dispatching.prepared import PreparedGluon, prepare

PINGPONG = validate_config({"loads": "gluon_pingpong", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4,
                            "num_stages": 2, "grid": "persistent_zigzag", "tile_order": "head_major"})


def _qkv(batch=2, q_heads=8, kv_heads=2, q_len=300, kv_len=300, head_dim=64):
    make = lambda h, n: torch.zeros(batch, h, n, head_dim, dtype=torch.bfloat16)  # noqa: E731
    return make(q_heads, q_len), make(kv_heads, kv_len), make(kv_heads, kv_len)


def test_a_call_hands_the_kernel_its_descriptors_lengths_and_scale():
    q, k, v = _qkv()
    bound = BoundGluon(q, k, causal=True, scale=0.125, config=PINGPONG, programs=132)
    out = torch.empty_like(q)
    args, _ = bound.arguments(q, k, v, out)
    qd, kd, vd, od, out_arg, scales_arg, *ints, qk_scale = args
    assert [d.block_shape for d in (qd, kd, vd, od)] == [[64, 64], [128, 64], [128, 64], [1, 64, 64]]
    assert qd.shape == [2 * 8 * 300, 64] and kd.shape == [2 * 2 * 300, 64] and od.shape == [16, 300, 64]
    assert qd.base is q and od.base is out and out_arg is out and scales_arg is out
    assert ints == [2, 8, 2, 300, 300] and qk_scale == pytest.approx(0.125 * 1.4426950408889634)
    assert bound.grid == (min(3 * 16, 132), 1, 1)  # persistent: at most the programs, padded to 3-D
    # The layouts are worked out once: every call's descriptors share them.
    assert bound.arguments(q, k, v, out)[0][1].layout is kd.layout


@pytest.mark.parametrize("kv_len, key", [
    (300, (False, False, False, False, False)),  # ragged tail: MASK
    (512, (False, True, False, True, False)),  # a multiple of 16 and of BLOCK_N
    (144, (False, True, False, False, True)),  # fewer keys than the 300 queries: EMPTY_ROWS when causal
    (1, (True, False, False, False, True)),  # one key: Triton's value-1 class (a twin kernel on the GPU)
])
def test_the_specialization_class_covers_what_the_kernel_and_its_options_read_of_the_keys(kv_len, key):
    q, k, v = _qkv(kv_len=kv_len)
    bound = BoundGluon(q, k, causal=True, scale=0.125, config=PINGPONG, programs=132)
    assert bound.arguments(q, k, v, torch.empty_like(q))[1] == key
    # Calls of one class launch with the same options and the same kernel (Triton's key).
    options = launch_options(bound.variant, head_dim=64, causal=True, q_len=300, kv_len=kv_len)
    assert options["MASK"] is True  # causal always masks; the key's BLOCK_N bit is for non-causal calls
    full = launch_options(bound.variant, head_dim=64, causal=False, q_len=300, kv_len=kv_len)
    assert full["MASK"] == (not key[3])


def test_every_constexpr_the_kernel_declares_is_given_or_has_a_default():
    # The bound launch passes the constexprs in the kernel's order: the options, then defaults.
    options = launch_options(gluon_variant_for(PINGPONG), head_dim=64, causal=False, q_len=300, kv_len=300)
    params = [p for p in _GLUON_KERNEL(300, 300).params if p.is_constexpr]
    missing = [p.name for p in params if p.name not in options and p.default is inspect.Parameter.empty]
    assert not missing


def test_fp8_configs_are_not_bound_and_not_prepared():
    fp8 = PINGPONG.replace(use_fp8=True, grid="tiles")
    q, k, _ = _qkv()
    with pytest.raises(ValueError, match="fp8"):
        BoundGluon(q, k, causal=False, scale=0.125, config=fp8, programs=132)
    assert prepare(q, k, causal=False, scale=None, config=fp8) is None


def test_a_prepared_gluon_call_hands_bad_keys_and_key_ranges_back_to_the_launcher():
    q, k, v = _qkv()
    assert prepare(q, k, causal=True, scale=None, config=PINGPONG) is None  # CPU tensors: the launcher's
    prepared = PreparedGluon(q, k, causal=True, scale=None, config=PINGPONG)
    ends = torch.full((2,), 300, dtype=torch.int32)
    assert prepared(q, k, v, cache_seqlens=ends) is None
    assert prepared(q, k[:1], v[:1]) is None  # another batch
    assert prepared(q, k, v[:, :, :200]) is None  # k and v disagree
    assert prepared(q, k[:, :, :0], v[:, :, :0]) is None  # no key
    shifted = torch.zeros(2 * 2 * 300 * 64 + 1, dtype=torch.bfloat16)[1:].view(2, 2, 300, 64)
    with pytest.raises(ValueError, match="16-byte aligned"):
        prepared(q, shifted, v)
