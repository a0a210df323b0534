"""The runtime on a real GPU (``pytest -m gpu``): live spec, bf16 numerics, CUDA graphs,
torch.compile with CUDA graphs, CUDA-event timing, a small Llama against SDPA.

Each test uses a fresh store in a tmp dir (conftest), so configs come from the baselines
unless the test writes an entry.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from runtime_helpers import entry

from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.objectives.hardware import HardwareSpec
from flashtune.runtime.dispatching.dispatch import Dispatcher
from flashtune.runtime.storage.buckets import Bucket
from flashtune.runtime.storage.store import Store

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _qkv(batch=2, heads=8, kv_heads=2, q_len=512, kv_len=512, head_dim=128, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda h, n: torch.randn(batch, h, n, head_dim, generator=gen, device="cuda", dtype=torch.float32).to(dtype)  # noqa: E731 - a one-line helper reads better as a lambda here
    return make(heads, q_len), make(kv_heads, kv_len), make(kv_heads, kv_len)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_live_gpu_baseline_and_store_entry(store_path, head_dim, causal):
    d = Dispatcher(store_path)
    q, k, v = _qkv(head_dim=head_dim)
    out = d(q, k, v, causal=causal)
    resolution = d.explain(q, k, causal=causal)
    assert resolution.origin == "baseline"
    assert relative_error(out, reference_attention(q, k, v, causal=causal)) < 2e-2
    spec = HardwareSpec.from_device()
    bucket = Bucket("bfloat16", causal, head_dim, 4, 512, 512)
    Store(store_path).merge([entry(spec, bucket, resolution.config.replace(num_stages=2))])
    d.reload()
    out = d(q, k, v, causal=causal)
    assert d.explain(q, k, causal=causal).origin == "exact"
    assert relative_error(out, reference_attention(q, k, v, causal=causal)) < 2e-2


def test_cuda_graph_capture_and_replay():
    import flashtune.runtime.integrations.torch_op  # noqa: F401 - registers torch.ops.flashtune.flash_attention

    q, k, v = _qkv()
    op = torch.ops.flashtune.flash_attention
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up: compile, resolve the config
            op(q, k, v, True, None)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op(q, k, v, True, None)
    q2, k2, v2 = _qkv(seed=1)
    q.copy_(q2), k.copy_(k2), v.copy_(v2)
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(out, reference_attention(q2, k2, v2, causal=True)) < 2e-2


def test_torch_compile_with_cuda_graphs():
    import flashtune.runtime.integrations.torch_op  # noqa: F401 - registers torch.ops.flashtune.flash_attention

    def block(q, k, v):
        return torch.ops.flashtune.flash_attention(q, k, v, True, None).float().square().mean()

    compiled = torch.compile(block, mode="reduce-overhead", fullgraph=True)
    q, k, v = _qkv()
    for _ in range(3):  # cudagraph trees record on a later call
        result = compiled(q, k, v)
    expected = reference_attention(q, k, v, causal=True).square().mean()
    assert torch.allclose(result, expected, rtol=2e-2)


def test_online_tuner_times_with_cuda_events(store_path):
    from flashtune.objectives.types import Measurement, Status
    from flashtune.runtime.retuning.online import OnlineOptions, OnlineTuner
    from flashtune.runtime.retuning.timing import CudaEventTiming

    d = Dispatcher(store_path)
    options = OnlineOptions(window=16, min_samples=8, probation_samples=8, sample_every=1)
    fake_bench = lambda c, w: Measurement(config=c, workload=w, status=Status.OK, median_ms=1.0)  # noqa: E731 - a one-line helper reads better as a lambda here
    q, k, v = _qkv()
    with OnlineTuner(d, options=options, timing=CudaEventTiming(), benchmark=fake_bench) as tuner:
        for _ in range(40):
            d(q, k, v, causal=True)
        torch.cuda.synchronize()
        d(q, k, v, causal=True)  # drains the samples whose events completed
        metrics = tuner.metrics()
    assert metrics["sampled_calls"] >= 30 and metrics["latency_ms"] > 0 and metrics["tokens_per_s"] > 0


def test_small_llama_matches_sdpa():
    transformers = pytest.importorskip("transformers")
    from flashtune.runtime.integrations.hf_attention import register, set_attention

    name = register()
    config = transformers.LlamaConfig(
        vocab_size=1000, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, 1000, (2, 256), device="cuda")
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        set_attention(model, "sdpa")
        ref = model(ids).logits.float()
        set_attention(model, name)
        out = model(ids).logits.float()
    fallbacks = [str(w.message) for w in caught if "flashtune attention" in str(w.message)]
    assert not fallbacks, fallbacks  # our kernel ran, not the SDPA fallback
    # bf16 through two layers: differences of attention at ~1e-2 grow a little.
    assert relative_error(out, ref) < 5e-2


@pytest.mark.parametrize("q_len, heads, kv_heads", [(1, 32, 8), (4, 32, 8), (1, 16, 1)])
def test_decode_class_runs_the_decode_kernel_through_the_runtime(store_path, q_len, heads, kv_heads):
    d = Dispatcher(store_path)
    q, k, v = _qkv(batch=2, heads=heads, kv_heads=kv_heads, q_len=q_len, kv_len=4097)
    for seed in (1, 2):  # the first call takes the launcher, the second the prepared launch
        q, _, _ = _qkv(batch=2, heads=heads, kv_heads=kv_heads, q_len=q_len, kv_len=4097, seed=seed)
        out = d(q, k, v, causal=True)
        assert relative_error(out, reference_attention(q, k, v, causal=True)) < 2e-2
    resolution = d.explain(q, k, causal=True)
    assert resolution.config["kernel"] == "decode" and resolution.bucket.kind == "decode"
    assert "decode default" in resolution.detail and len(d._calls) == 1


def test_cuda_graph_captures_a_whole_decode_step_and_replays_new_inputs(store_path):
    """Several layers' attention with fixed buffers and per-sequence lengths on the device,
    captured once, replayed after the inputs (queries, new cache rows, lengths) change in place."""
    d = Dispatcher(store_path)
    layers, batch, heads, kv_heads, capacity, head_dim = 3, 4, 16, 4, 2048, 128
    gen = torch.Generator(device="cuda").manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=gen, device="cuda").to(torch.bfloat16)  # noqa: E731 - a one-line helper reads better as a lambda here
    qs = [rand(batch, heads, 1, head_dim) for _ in range(layers)]
    ks = [rand(batch, kv_heads, capacity, head_dim) for _ in range(layers)]
    vs = [rand(batch, kv_heads, capacity, head_dim) for _ in range(layers)]
    seqlens = torch.tensor([1000, 17, 1, 2048], dtype=torch.int32, device="cuda")

    def step() -> list[torch.Tensor]:
        return [d(qs[i], ks[i], vs[i], causal=True, cache_seqlens=seqlens) for i in range(layers)]

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up: compile, resolve, prepare
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    for lengths in ([1001, 18, 2, 2048], [5, 1500, 0, 64]):
        for i in range(layers):
            qs[i].copy_(rand(batch, heads, 1, head_dim))
            ks[i][:, :, 1000:1001].copy_(rand(batch, kv_heads, 1, head_dim))  # a decoding step's new row
            vs[i][:, :, 1000:1001].copy_(rand(batch, kv_heads, 1, head_dim))
        seqlens.copy_(torch.tensor(lengths, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        for i in range(layers):
            for b, n in enumerate(lengths):
                if n == 0:
                    assert outs[i][b].abs().max() == 0
                    continue
                ref = reference_attention(qs[i][b:b + 1], ks[i][b:b + 1, :, :n], vs[i][b:b + 1, :, :n], causal=True)
                assert relative_error(outs[i][b:b + 1], ref) < 2e-2, (lengths, i, b)
    assert all(d.explain(qs[0], ks[0], causal=True).config["kernel"] == "decode" for _ in range(1))
