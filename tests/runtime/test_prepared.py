"""Prepared calls and shape classes: the hot path after a key's first call, the decode class,
what ``explain`` says. Real kernels under the interpreter (fp16, tiny shapes)."""

from __future__ import annotations

import pytest
import torch
from runtime_helpers import cfg, entry

import flashtune.runtime.dispatching.dispatch as dispatch
from flashtune.kernels.config import Config
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.kernels.space import kernel_of, validate_config
from flashtune.runtime.dispatching.dispatch import Dispatcher
from flashtune.runtime.dispatching.prepared import PreparedCall, PreparedDecode
from flashtune.runtime.storage.buckets import Bucket
from flashtune.runtime.storage.store import Store


def _qkv(batch=2, heads=4, kv_heads=2, q_len=1, kv_len=40, head_dim=32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    make = lambda h, n: torch.randn(batch, h, n, head_dim, generator=gen).to(torch.float16)  # noqa: E731 - a one-line helper reads better as a lambda here
    return make(heads, q_len), make(kv_heads, kv_len), make(kv_heads, kv_len)


class _Counting:
    """The real launcher, counting its calls (the first call of a key must take it)."""

    def __init__(self) -> None:
        self.calls = 0
        self.real = dispatch._launcher

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.real(*args, **kwargs)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> _Counting:
    launcher = _Counting()
    monkeypatch.setattr(dispatch, "_launcher", launcher)
    return launcher


@pytest.fixture
def sim(store_path, h200) -> Dispatcher:
    return Dispatcher(store_path, hardware=lambda device: h200)


@pytest.mark.parametrize("q_len, kind, prepared_type", [(1, "decode", PreparedDecode), (24, "prefill", PreparedCall)])
def test_first_call_takes_the_launcher_later_calls_the_prepared_launch(sim, counting, q_len, kind, prepared_type):
    q, k, v = _qkv(q_len=q_len, kv_len=40)
    out = sim(q, k, v, causal=True)
    assert relative_error(out, reference_attention(q, k, v, causal=True)) < 5e-3
    assert counting.calls == 1 and kernel_of(sim.explain(q, k, causal=True).config) == kind
    # A growing KV cache: another length and strides in the same kv_len bucket, new data.
    for kv_len, seed in ((41, 1), (64, 2)):
        q, k, v = _qkv(q_len=q_len, kv_len=kv_len, seed=seed)
        out = sim(q, k, v, causal=True)
        assert relative_error(out, reference_attention(q, k, v, causal=True)) < 5e-3
    assert counting.calls == 1
    assert [type(p) for p in sim._calls.values()] == [prepared_type]


def test_checks_the_key_does_not_cover_still_name_the_argument(sim, counting):
    q, k, v = _qkv()
    sim(q, k, v)
    with pytest.raises(ValueError, match="k and v"):
        sim(q, k, v[:, :, :30])
    with pytest.raises(ValueError, match="batch"):
        sim(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="contiguous in its last dim"):
        sim(q, k.transpose(-1, -2).contiguous().transpose(-1, -2), v)
    assert counting.calls == 4  # each bad call went back to the launcher


def test_decode_with_per_sequence_lengths_is_prepared_and_checked(sim, counting):
    q, k, v = _qkv(kv_len=48)
    for seed, lengths in ((0, [48, 5]), (1, [0, 33])):
        q, _, _ = _qkv(kv_len=48, seed=seed)
        seqlens = torch.tensor(lengths, dtype=torch.int32)
        out = sim(q, k, v, causal=True, cache_seqlens=seqlens)
        for b, n in enumerate(lengths):
            if n:
                ref = reference_attention(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], causal=True)
                assert relative_error(out[b:b + 1], ref) < 5e-3
            else:
                assert out[b].abs().max() == 0
    assert counting.calls == 1
    with pytest.raises(ValueError, match="cache_seqlens"):
        sim(q, k, v, causal=True, cache_seqlens=torch.tensor([1, 2, 3], dtype=torch.int32))
    # Values are read on the host on a key's first call only (a read per call would
    # synchronise every decoding step and cannot run inside CUDA-graph capture); later
    # calls rely on the kernel clamping each length to the cache.
    fresh = Dispatcher(sim.store, hardware=lambda device: sim.hardware_for(device)[0])
    for bad in ([1, 49], [-1, 2]):
        with pytest.raises(ValueError, match="cache_seqlens"):
            fresh(q, k, v, causal=True, cache_seqlens=torch.tensor(bad, dtype=torch.int32))


def test_swap_and_reload_drop_prepared_calls(sim):
    q, k, v = _qkv(q_len=24)
    sim(q, k, v)
    assert sim._calls
    key = dispatch.cache_key(q, k, False)
    sim.swap(key, cfg(32, 32, 4, 1))
    assert not sim._calls
    out = sim(q, k, v)
    assert relative_error(out, reference_attention(q, k, v)) < 5e-3
    assert next(iter(sim._calls.values())).options["BLOCK_M"] == 32
    sim.reload()
    assert not sim._calls
    sim(q, k, v)
    sim.attach(None)  # an online tuner must see every call: attaching drops prepared calls
    assert not sim._calls


def test_explain_names_bucket_class_and_why(sim, store_path, h200):
    q, k, _ = _qkv(batch=2, heads=4, kv_heads=2, q_len=1, kv_len=3000)
    res = sim.explain(q, k, causal=True)
    assert res.bucket == Bucket("float16", True, 32, 2, 1, 4096, "decode", 4)
    assert res.origin == "baseline" and kernel_of(res.config) == "decode"
    assert "decode: q_len 1 <= 16" in res.detail and "sm90 decode default" in res.detail
    assert f"num_splits {res.config['num_splits']}" in res.detail and "132 SMs" in res.detail
    # A prefill entry of the same shapes never serves the decode call; a decode entry does.
    decode = validate_config(Config(kernel="decode", BLOCK_N=32, num_splits=4, num_warps=4, num_stages=2))
    Store(store_path).merge([
        entry(h200, Bucket("float16", True, 32, 2, 1, 4096, "prefill", 4), cfg(64, 32, 4, 2)),
        entry(h200, Bucket("float16", True, 32, 2, 1, 8192, "decode", 4), decode),
    ])
    sim.reload()
    res = sim.explain(q, k, causal=True)
    assert res.origin == "nearest" and res.config == decode
    assert "nearest store bucket float16_causal_d32_g2_q1_k8192_bh4_decode at distance 1" in res.detail
    Store(store_path).merge([entry(h200, res.bucket, decode.replace(num_splits=8))])
    sim.reload()
    res = sim.explain(q, k, causal=True)
    assert res.origin == "exact" and "exact store hit" in res.detail and res.config["num_splits"] == 8


def test_decode_default_splits_follow_kv_len_and_batch_heads(store_path, h200):
    from flashtune.objectives.types import Workload
    from flashtune.runtime.dispatching.baselines import decode_default

    long_single = decode_default(h200, Workload(1, 32, 8, 1, 131072, 128))[0]["num_splits"]
    short_single = decode_default(h200, Workload(1, 32, 8, 1, 1024, 128))[0]["num_splits"]
    long_wide = decode_default(h200, Workload(64, 32, 8, 1, 131072, 128))[0]["num_splits"]
    assert long_single > short_single >= 1 and long_single > long_wide >= 1
    assert decode_default(None, Workload(1, 32, 8, 1, 131072, 128))[0]["num_splits"] < long_single  # 4 SMs
