"""GPU suite of the lean descriptor path (loads lean, lean_ws, lean_overlap; ``pytest -m gpu``
on the H200) and of tile_order: bf16 numerics of its switches on every suite shape, odd lengths, strided inputs (per-head
descriptors), fp8, CUDA-graph replay, and the op's refusal of known failures.

Every config here is either predicted infeasible (and then refused by the op with the
reason) or must match the float32 reference: a compile error the model does not predict
fails the test, which is how a new known failure gets recorded.
"""

import itertools
import math

import pytest
import torch

from flashtune.kernels import Config, flash_attention
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.objectives import SUITE, Workload
from flashtune.objectives.bench import FP8_TOLERANCE, TOLERANCE, make_inputs
from flashtune.objectives.feasibility import check

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SHAPES = sorted({(w.head_dim, w.causal, w.q_heads // w.kv_heads) for w in SUITE})


def _config(**knobs) -> Config:
    base = dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2, loads="lean", use_fp8=False, grid="tiles",
                tile_order="head_major")
    return Config({**base, **knobs})


def _switches(head_dim: int) -> list[Config]:
    tiles = [(128, 128 if head_dim <= 128 else 64, 8, 2), (64, 64, 4, 2), (64, 128 if head_dim <= 128 else 64, 4, 1)]
    lean = [_config(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s, loads=loads, tile_order=order)
            for (bm, bn, w, s), loads, order in itertools.product(
                tiles, ("lean", "lean_ws", "lean_overlap"), ("head_major", "longest_first"))]
    # tile_order on the recorded kernels too (tiles and persistent grids).
    old = [_config(loads=loads, grid=grid, tile_order="longest_first")
           for loads, grid in itertools.product(("pointer", "tma", "tma_ws"), ("tiles", "persistent"))]
    return lean + old


@pytest.fixture(scope="module")
def hardware():
    from flashtune.objectives.hardware import HardwareSpec

    return HardwareSpec.from_device()


@pytest.fixture(scope="module")
def precompiled(hardware):
    from flashtune.objectives.precompile import CompilePool

    pool = CompilePool(16)
    pairs = [(c, _small(*shape)) for shape in SHAPES for c in _switches(shape[0])]
    for c, w in pairs:
        if check(c, w, hardware).feasible:
            pool.submit(c, w)
    for c, w in pairs:
        pool.wait(c, w)
    pool.close()


def _small(head_dim: int, causal: bool, group: int) -> Workload:
    return Workload(2, 4 * group, 4, 1000, 1000, head_dim, "bfloat16", causal)  # ragged: 1000 % 64 != 0


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"d{s[0]}-{'causal' if s[1] else 'full'}-g{s[2]}")
def test_switches_on_every_suite_shape(shape, hardware, precompiled):
    w = _small(*shape)
    q, k, v = make_inputs(w, seed=7, dev=torch.device("cuda"))
    ref = reference_attention(q, k, v, causal=w.causal)
    failures, checked = [], 0
    for config in _switches(w.head_dim):
        if not check(config, w, hardware).feasible:
            with pytest.raises(ValueError, match="cannot run|shared memory"):
                flash_attention(q, k, v, causal=w.causal, config=config)
            continue
        err = relative_error(flash_attention(q, k, v, causal=w.causal, config=config), ref)
        checked += 1
        if not err < TOLERANCE["bfloat16"]:
            failures.append((config.to_dict(), err))
    assert checked > 0
    assert not failures, failures


# lean_overlap: its prologue/epilogue blocks are where a short or ragged sequence can go
# wrong; plain lean runs the ragged 1000-long shapes above.
@pytest.mark.parametrize("loads", ["lean_overlap"])
@pytest.mark.parametrize("nq,nk", [(1, 1), (1, 300), (300, 1), (37, 1000), (1000, 37), (777, 777), (4097, 4099)])
@pytest.mark.parametrize("causal", [False, True])
def test_odd_lengths(nq, nk, causal, loads):
    w = Workload(1, 8, 2, nq, nk, 128, "bfloat16", causal)
    q, k, v = make_inputs(w, seed=nq * 7 + nk, dev=torch.device("cuda"))
    ref = reference_attention(q, k, v, causal=causal)
    for grid in ("tiles", "persistent"):
        out = flash_attention(q, k, v, causal=causal, config=_config(loads=loads, grid=grid))
        assert relative_error(out, ref) < TOLERANCE["bfloat16"], grid


def test_strided_inputs_and_many_tiles_per_persistent_program():
    # (batch, seq, heads, dim) storage: not flat, so the fallback descriptors (lean.FALLBACK_DESC).
    g = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(4, 1000, 16, 128, generator=g, device="cuda").to(torch.bfloat16).transpose(1, 2)
    k, v = (torch.randn(4, 1037, 4, 128, generator=g, device="cuda").to(torch.bfloat16).transpose(1, 2)
            for _ in range(2))
    for causal, grid in itertools.product((False, True), ("tiles", "persistent")):
        out = flash_attention(q, k, v, causal=causal, config=_config(grid=grid, loads="lean_overlap"))
        assert relative_error(out, reference_attention(q, k, v, causal=causal)) < TOLERANCE["bfloat16"]


@pytest.mark.parametrize("causal", [False, True])
def test_fp8_within_its_budget(causal):
    w = Workload(2, 8, 2, 1000, 1000, 128, "bfloat16", causal)
    q, k, v = make_inputs(w, seed=11, dev=torch.device("cuda"))
    ref = reference_attention(q, k, v, causal=causal)
    for loads in ("lean", "lean_ws", "lean_overlap"):
        out = flash_attention(q, k, v, causal=causal, config=_config(loads=loads, use_fp8=True))
        assert relative_error(out, ref) < FP8_TOLERANCE, loads


def test_a_cuda_graph_replays_the_lean_path_on_new_data():
    """Host descriptors are kernel parameters: a captured launch reads whatever the captured
    buffers hold at replay."""
    w = Workload(2, 8, 8, 1024, 1024, 128, "bfloat16", True)
    q, k, v = make_inputs(w, seed=1, dev=torch.device("cuda"))
    config = _config(loads="lean_overlap")
    flash_attention(q, k, v, causal=True, config=config)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flash_attention(q, k, v, causal=True, config=config)
    q2, k2, v2 = make_inputs(w, seed=2, dev=torch.device("cuda"))
    q.copy_(q2), k.copy_(k2), v.copy_(v2)
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(out, reference_attention(q2, k2, v2, causal=True)) < TOLERANCE["bfloat16"]


def test_known_failures_are_refused_with_the_reason():
    q = torch.randn(1, 2, 256, 128, device="cuda", dtype=torch.bfloat16)
    config = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "loads": "tma_ws"}
    with pytest.raises(ValueError, match="PassManager::run failed") as info:
        flash_attention(q, q, q, config=config)
    assert "'loads': 'tma_ws'" in str(info.value)
    assert math.isfinite(flash_attention(q, q, q, config={**config, "num_warps": 8}).float().abs().max().item())
