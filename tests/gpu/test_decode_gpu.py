"""Decode kernel on the GPU (``pytest -m gpu``): bf16/fp16 against the float32 reference on
the issue's decode shapes (q_len 1 and 4, kv_len 1, 77, 4097, GQA 32/8 and MQA, per-sequence
lengths including 0 and 1), a CUDA graph capturing a decode launch, the default config, and
the fused combine (the split kernel's last program merging the splits) against the launched one."""

import pytest
import torch

from flashtune.kernels import Config, flash_attention
from flashtune.kernels.decode import DecodeWorkspace, launch_decode
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.objectives import Workload
from flashtune.objectives.bench import TOLERANCE
from flashtune.objectives.feasibility import check

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
# Three compiled variants (compiles dominate the run), split counts from none to the most.
CONFIGS = [Config(kernel="decode", BLOCK_N=bn, num_splits=s, num_warps=w, num_stages=st, loads=loads)
           for bn, s, w, st, loads in [(64, 1, 4, 2, "pointer"), (128, 16, 8, 3, "tma"), (32, 128, 2, 4, "pointer")]]


@pytest.fixture(scope="module")
def hardware():
    from flashtune.objectives.hardware import HardwareSpec

    return HardwareSpec.from_device()


def _qkv(b, hq, hkv, nq, nk, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g, device="cuda").to(dtype)
                 for shape in ((b, hq, nq, d), (b, hkv, nk, d), (b, hkv, nk, d)))


def _reference(q, k, v, causal, lengths):
    if lengths is None:
        return reference_attention(q, k, v, causal=causal)
    ref = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for b, n in enumerate(lengths):
        if n:
            ref[b:b + 1] = reference_attention(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], causal=causal)
    return ref


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c['loads']}{c['BLOCK_N']}s{c['num_splits']}")
@pytest.mark.parametrize(
    "b,hq,hkv,nq,nk,d,causal",
    [
        (2, 32, 8, 1, 1, 128, False),
        (2, 32, 8, 1, 77, 128, False),
        (2, 32, 8, 1, 4097, 128, False),
        (2, 32, 8, 4, 4097, 128, True),
        (2, 32, 1, 1, 4097, 128, False),  # MQA
        (2, 32, 1, 4, 77, 128, True),  # MQA x 4 queries: two row blocks
        (1, 16, 16, 1, 4097, 64, False),
        (1, 8, 2, 1, 4097, 256, True),
    ],
)
def test_numerics(b, hq, hkv, nq, nk, d, causal, config, dtype, hardware):
    if not check(config, Workload(b, hq, hkv, nq, nk, d, dtype, causal), hardware).feasible:
        pytest.skip("does not fit this GPU's shared memory")
    q, k, v = _qkv(b, hq, hkv, nq, nk, d, DTYPES[dtype])
    out = flash_attention(q, k, v, causal=causal, config=config)
    err = relative_error(out, reference_attention(q, k, v, causal=causal))
    assert err < TOLERANCE[dtype], f"relative error {err:.2e}"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nq", [1, 4])
def test_per_sequence_lengths(nq, causal, dtype):
    lengths = [0, 1, 77, 4097, 4096, 2000]
    q, k, v = _qkv(len(lengths), 32, 8, nq, 4097, 128, DTYPES[dtype])
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    for config in [None, *CONFIGS]:
        out = flash_attention(q, k, v, causal=causal, config=config, cache_seqlens=seqlens)
        err = relative_error(out, _reference(q, k, v, causal, lengths))
        assert err < TOLERANCE[dtype], f"relative error {err:.2e} for {config}"
        assert torch.count_nonzero(out[0]) == 0


def test_default_config_on_the_issue_rows():
    for b, hq, hkv, nk, d in [(1, 32, 8, 32768, 128), (64, 32, 8, 2048, 128), (1, 16, 16, 65536, 64)]:
        q, k, v = _qkv(b, hq, hkv, 1, nk, d, torch.bfloat16)
        err = relative_error(flash_attention(q, k, v), reference_attention(q, k, v))
        assert err < TOLERANCE["bfloat16"], (b, hq, hkv, nk, d, err)


@pytest.mark.parametrize("combine", ["launch", "fused"])
def test_cuda_graph_replays_a_decode_step_with_new_lengths(combine):
    q, k, v = _qkv(4, 32, 8, 1, 4096, 128, torch.bfloat16)
    config = CONFIGS[2]  # pointer loads, 128 splits: the split and combine launches both captured
    seqlens = torch.tensor([4096, 100, 1, 0], dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    workspace = DecodeWorkspace.for_query(q)

    def step():
        launch_decode(q, k, v, out, causal=True, scale=128 ** -0.5, config=config, cache_seqlens=seqlens,
                      workspace=workspace, combine=combine)

    step()  # compile outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for lengths in ([4096, 100, 1, 0], [17, 4095, 2048, 3]):
        seqlens.copy_(torch.tensor(lengths, dtype=torch.int32))
        q.normal_()
        graph.replay()
        torch.cuda.synchronize()
        err = relative_error(out, _reference(q, k, v, True, lengths))
        assert err < TOLERANCE["bfloat16"], (lengths, err)


def test_capture_skips_the_host_check_and_the_kernel_clamps():
    # Inside capture flash_attention cannot read the lengths; an out-of-range one is clamped.
    q, k, v = _qkv(2, 32, 8, 1, 256, 128, torch.bfloat16)
    seqlens = torch.tensor([256, 256], dtype=torch.int32, device="cuda")
    flash_attention(q, k, v, cache_seqlens=seqlens)  # compile and allocate outside
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flash_attention(q, k, v, cache_seqlens=seqlens)
    seqlens.copy_(torch.tensor([10_000, -5], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(out[:1], reference_attention(q[:1], k[:1], v[:1])) < TOLERANCE["bfloat16"]
    assert torch.count_nonzero(out[1]) == 0


@pytest.mark.parametrize("config", CONFIGS[1:], ids=lambda c: f"{c['loads']}{c['BLOCK_N']}s{c['num_splits']}")
@pytest.mark.parametrize("b,hq,hkv,nk", [(1, 32, 8, 32768), (8, 32, 8, 8192), (2, 32, 1, 4097)])
def test_fused_combine_matches_the_launched_one_call_after_call(b, hq, hkv, nk, config):
    # The last split merges partials other SMs wrote in the same launch: a missing fence
    # shows as a row that differs now and then, so the same call runs 20 times.
    q, k, v = _qkv(b, hq, hkv, 1, nk, 128, torch.bfloat16)
    workspace = DecodeWorkspace.for_query(q)
    launched, fused = torch.empty_like(q), torch.empty_like(q)
    launch_decode(q, k, v, launched, causal=True, scale=128 ** -0.5, config=config, workspace=workspace)
    assert relative_error(launched, _reference(q, k, v, True, None)) < TOLERANCE["bfloat16"]
    for _ in range(20):
        fused.fill_(float("nan"))
        launch_decode(q, k, v, fused, causal=True, scale=128 ** -0.5, config=config, workspace=workspace,
                      combine="fused")
        torch.testing.assert_close(fused, launched, rtol=2e-2, atol=2e-3)
    assert torch.count_nonzero(workspace.counters) == 0
