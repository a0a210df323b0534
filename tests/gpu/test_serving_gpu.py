"""Serving paths on the GPU (``pytest -m gpu``): per-sequence key ranges in bf16 (prefill and
decode kernels) against the float32 reference, the bound decode launch against the jit
dispatcher's over a growing cache, and the op with key ranges captured in CUDA graphs by
``torch.compile(mode="reduce-overhead")``, replayed with new lengths."""

import pytest
import torch

import flashtune.runtime.integrations.torch_op  # noqa: F401 - registers torch.ops.flashtune.flash_attention
from flashtune.kernels import Config, flash_attention
from flashtune.kernels.decode import launch_decode
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.runtime.dispatching.dispatch import Dispatcher, cache_key

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

BF16_TOL = 2e-2


def _qkv(b, hq, hkv, nq, nk, d, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g, device="cuda").to(torch.bfloat16)
                 for shape in ((b, hq, nq, d), (b, hkv, nk, d), (b, hkv, nk, d)))


def _reference(q, k, v, starts, ends, causal=True):
    ref = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for b, (s, e) in enumerate(zip(starts, ends)):
        if e > s:
            ref[b:b + 1] = reference_attention(q[b:b + 1], k[b:b + 1, :, s:e], v[b:b + 1, :, s:e], causal=causal)
    return ref


@pytest.mark.parametrize("q_len,config", [
    (1, None), (4, None), (333, None),
    (333, Config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3, loads="tma")),
    (1, Config(kernel="decode", BLOCK_N=64, num_splits=16, num_warps=4, num_stages=3, loads="tma", combine="fused")),
])
def test_key_ranges_bf16_gqa(q_len, config):
    # A static cache of 4099 slots, 32/8 heads: left padding (starts), filled lengths (ends).
    q, k, v = _qkv(3, 32, 8, q_len, 4099, 128)
    starts, ends = [0, 517, 40], [4099, 3001, 40 + q_len + 77]
    out = flash_attention(q, k, v, causal=True, config=config,
                          cache_seqlens=torch.tensor(ends, dtype=torch.int32, device="cuda"),
                          kv_start=torch.tensor(starts, dtype=torch.int32, device="cuda"))
    assert relative_error(out, _reference(q, k, v, starts, ends)) < BF16_TOL


@pytest.mark.parametrize("combine", ["launch", "fused"])
def test_bound_decode_launch_equals_the_jit_launch_over_a_growing_cache(tmp_path, combine):
    # Lengths across 16-divisibility boundaries (one kv_len bucket): each specialization
    # class gets its own bound kernel; the output must be the jit launch's, bit for bit.
    dispatcher = Dispatcher(tmp_path / "none.json")
    config = Config(kernel="decode", BLOCK_N=64, num_splits=16, num_warps=4, num_stages=3, loads="pointer",
                    combine=combine)
    q, k_all, v_all = _qkv(2, 32, 8, 1, 4160, 128)
    dispatcher.config_for(q, k_all, True)
    dispatcher.swap(cache_key(q, k_all, True), config)
    for length in range(4100, 4160, 3):
        k, v = k_all[:, :, :length].contiguous(), v_all[:, :, :length].contiguous()
        bound = dispatcher(q, k, v, causal=True)
        jit = torch.empty_like(q)
        launch_decode(q, k, v, jit, causal=True, scale=128 ** -0.5, config=config)
        assert torch.equal(bound, jit), length
        assert relative_error(bound, reference_attention(q, k, v, causal=True)) < BF16_TOL
    bound_kernels = [len(p.bound.kernels) for p in dispatcher._calls.values() if getattr(p, "bound", None)]
    assert bound_kernels and max(bound_kernels) >= 2  # more than one specialization class was bound


def test_compiled_step_with_key_ranges_is_captured_and_replays_new_lengths(tmp_path):
    from flashtune.runtime.dispatching.dispatch import set_store

    set_store(tmp_path / "none.json")
    q, k, v = _qkv(2, 32, 8, 1, 2048, 128)
    ranges = torch.tensor([[0, 300], [1000, 2048]], dtype=torch.int32, device="cuda")

    def step(q, k, v, ranges):
        return torch.ops.flashtune.flash_attention(q, k, v, True, None, ranges[1], ranges[0])

    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    for ends in ([1000, 2048], [1001, 1500], [1777, 301], [1000, 2048]):
        ranges[1].copy_(torch.tensor(ends, dtype=torch.int32))  # in place: the graph reads the new values
        out = compiled(q, k, v, ranges).clone()
        expected = _reference(q, k, v, ranges[0].tolist(), ends)
        assert relative_error(out, expected) < BF16_TOL, ends


@pytest.mark.parametrize("head_dim,causal,lengths", [
    (128, True, (4096, 4096)), (128, False, (1000, 1000)), (128, True, (333, 1000)), (256, False, (1000, 1000)),
    (64, True, (2048, 2048)),
])
def test_an_empty_store_serves_the_hopper_baseline_and_matches_the_reference(tmp_path, head_dim, causal, lengths):
    # No store: an H100/H200 serves the architecture's first baseline (the Gluon ping-pong at
    # head_dim 64, 128 and 256, runtime/dispatching/baselines.py); transformers' layout (q a
    # transposed view, GQA 32/8), then the same bucket with key ranges, which the Gluon kernel
    # cannot take: a baseline that can serves those.
    dispatcher = Dispatcher(tmp_path / "none.json")
    q_len, kv_len = lengths
    q, k, v = _qkv(2, 32, 8, q_len, kv_len, head_dim, seed=head_dim)
    q = q.transpose(1, 2).contiguous().transpose(1, 2)  # (b, s, h, d) storage, as transformers passes it
    resolution = dispatcher.explain(q, k, causal)
    hopper = torch.cuda.get_device_capability() == (9, 0)
    if hopper:
        assert resolution.origin == "baseline"
        assert resolution.config["loads"] == "gluon_pingpong", resolution.detail
    ref = reference_attention(q, k, v, causal=causal)
    assert relative_error(dispatcher(q, k, v, causal=causal), ref) < BF16_TOL
    ends = torch.full((2,), kv_len, dtype=torch.int32, device="cuda")
    starts = torch.tensor([0, 7], dtype=torch.int32, device="cuda")
    ranged = dispatcher(q, k, v, causal=causal, cache_seqlens=ends, kv_start=starts)
    assert relative_error(ranged, _reference(q, k, v, [0, 7], [kv_len, kv_len], causal=causal)) < BF16_TOL


@pytest.mark.parametrize("head_dim,causal", [(64, False), (128, True)])
def test_bound_gluon_launch_equals_the_jit_launch_across_key_classes(tmp_path, head_dim, causal):
    # The Gluon prefill kernel's prepared call launches the compiled kernel past the jit
    # dispatcher (kernels.gluon.BoundGluon): over key counts of one kv_len bucket in every
    # class (a multiple of BLOCK_N, of 16 only, ragged), bit for bit the jit launch's.
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Gluon kernel is Hopper's")
    from flashtune.kernels.attention import persistent_programs
    from flashtune.kernels.gluon import gluon_variant_for, launch_gluon
    from flashtune.kernels.space import validate_config
    from flashtune.runtime.dispatching.prepared import PreparedGluon

    config = validate_config({"loads": "gluon_pingpong", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4,
                              "num_stages": 2, "grid": "persistent_zigzag", "tile_order": "head_major"})
    dispatcher = Dispatcher(tmp_path / "none.json")
    q, k_all, v_all = _qkv(2, 32, 8, 300, 1300, head_dim, seed=3)
    dispatcher.config_for(q, k_all, causal)
    dispatcher.swap(cache_key(q, k_all, causal), config)
    for length in (1280, 1152, 1040, 1100, 1031, 1280):
        k, v = k_all[:, :, :length].contiguous(), v_all[:, :, :length].contiguous()
        bound = dispatcher(q, k, v, causal=causal)
        jit = torch.empty_like(q)
        launch_gluon(q, k, v, jit, causal=causal, scale=head_dim ** -0.5, variant=gluon_variant_for(config),
                     programs=persistent_programs(q.device))
        assert torch.equal(bound, jit), length
        assert relative_error(bound, reference_attention(q, k, v, causal=causal)) < BF16_TOL
    prepared = [p for p in dispatcher._calls.values() if isinstance(p, PreparedGluon)]
    assert prepared and max(len(p.bound.kernels) for p in prepared) >= 2
