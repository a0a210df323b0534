"""GPU suite (``pytest -m gpu`` on the lent H200): bf16 and fp16 numerics of every
feasible config on each workload shape of the suite, and odd shapes for a sample.

Shapes are the suite's head_dim / causal / grouped-query combinations at a smaller batch
and length (multiples of 16, so Triton reuses the sweep's specializations). Compilation
dominates, so every config is compiled first in a process pool.
"""

import math
import random

import pytest
import torch

from flashtune.kernels import all_configs, flash_attention
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.objectives import SUITE, Workload
from flashtune.objectives.bench import FP8_TOLERANCE, TOLERANCE, make_inputs
from flashtune.objectives.feasibility import check

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

DTYPES = ("bfloat16", "float16")
# One small workload per distinct kernel specialization of the suite.
SHAPES = sorted({(w.head_dim, w.causal, w.q_heads // w.kv_heads) for w in SUITE})


def _small(head_dim: int, causal: bool, group: int, dtype: str) -> Workload:
    return Workload(2, 4 * group, 4, 512, 512, head_dim, dtype, causal)


def _tolerance(config, dtype: str) -> float:
    """fp8 configs are checked against their own budget (objectives.bench.FP8_TOLERANCE)."""
    return FP8_TOLERANCE if config["use_fp8"] else TOLERANCE[dtype]


@pytest.fixture(scope="module")
def hardware():
    from flashtune.objectives.hardware import HardwareSpec

    return HardwareSpec.from_device()


@pytest.fixture(scope="module")
def precompiled(hardware):
    """Fill Triton's cache for every (shape, dtype, feasible config) in parallel.

    Only the exhaustive test asks for it (thousands of compiles): the other tests here
    compile a handful of configs and can run on their own in a short device call.
    """
    from flashtune.objectives.precompile import CompilePool

    pool = CompilePool(16)
    pairs = []
    for shape in SHAPES:
        for dtype in DTYPES:
            w = _small(*shape, dtype)
            pairs += [(c, w) for c in all_configs() if check(c, w, hardware).feasible]
    for c, w in pairs:
        pool.submit(c, w)
    for c, w in pairs:
        pool.wait(c, w)
    pool.close()


# Thousands of compiles since the space grew to 9,600 configs (alone on the H200, 2026-12-02, it ran
# past 400 s inside the precompile): a device call of its own; `-m "gpu and not slow"` skips it.
@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"d{s[0]}-{'causal' if s[1] else 'full'}-g{s[2]}")
def test_every_feasible_config(shape, dtype, hardware, precompiled):
    w = _small(*shape, dtype)
    q, k, v = make_inputs(w, seed=7, dev=torch.device("cuda"))
    ref = reference_attention(q, k, v, causal=w.causal)
    failures = []
    checked = 0
    for config in all_configs():
        if not check(config, w, hardware).feasible:
            continue
        out = flash_attention(q, k, v, causal=w.causal, config=config)
        err = relative_error(out, ref)
        checked += 1
        if not err < _tolerance(config, dtype):
            failures.append((config.to_dict(), err))
    assert checked > 0
    assert not failures, failures


@pytest.mark.parametrize("grid", ["tiles", "persistent"])
@pytest.mark.parametrize("nq,nk", [(1, 1), (1, 300), (300, 1), (37, 1000), (1000, 37), (777, 777), (4097, 4099)])
@pytest.mark.parametrize("causal", [False, True])
def test_odd_lengths_sampled_configs(nq, nk, causal, grid, hardware):
    w = Workload(1, 8, 2, nq, nk, 128, "bfloat16", causal)
    q, k, v = make_inputs(w, seed=nq * 7 + nk, dev=torch.device("cuda"))
    ref = reference_attention(q, k, v, causal=causal)
    configs = [c for c in all_configs() if c["grid"] == grid and check(c, w, hardware).feasible]
    for config in random.Random(nq + nk).sample(configs, 4):
        err = relative_error(flash_attention(q, k, v, causal=causal, config=config), ref)
        assert err < _tolerance(config, "bfloat16"), (config, err)


@pytest.mark.parametrize("loads", ["pointer", "tma", "tma_ws"])
@pytest.mark.parametrize("causal", [False, True])
def test_persistent_grid_with_more_tiles_than_sms(loads, causal, hardware):
    """Each program loops over several tiles (per-tile descriptors for TMA); GQA, ragged tails."""
    w = Workload(4, 16, 4, 1000, 1037, 128, "bfloat16", causal)
    q, k, v = make_inputs(w, seed=5, dev=torch.device("cuda"))
    ref = reference_attention(q, k, v, causal=causal)
    config = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "loads": loads, "use_fp8": False}
    assert math.ceil(1000 / 128) * 4 * 16 > torch.cuda.get_device_properties(q.device).multi_processor_count
    for grid in ("tiles", "persistent"):
        out = flash_attention(q, k, v, causal=causal, config={**config, "grid": grid})
        assert torch.isfinite(out).all(), grid
        assert relative_error(out, ref) < TOLERANCE["bfloat16"], grid


def test_infeasible_config_is_a_clear_error_not_a_triton_traceback():
    q = torch.randn(1, 1, 64, 256, device="cuda", dtype=torch.bfloat16)
    big = {"BLOCK_M": 256, "BLOCK_N": 128, "num_warps": 8, "num_stages": 5}
    with pytest.raises(ValueError, match="shared memory"):
        flash_attention(q, q, q, config=big)


def test_default_config_runs_every_suite_shape():
    for w in SUITE:
        small = Workload(1, w.q_heads, w.kv_heads, 1000, 1000, w.head_dim, "bfloat16", w.causal)
        q, k, v = make_inputs(small, seed=1, dev=torch.device("cuda"))
        out = flash_attention(q, k, v, causal=w.causal)
        assert relative_error(out, reference_attention(q, k, v, causal=w.causal)) < TOLERANCE["bfloat16"]
        assert math.isfinite(out.float().abs().max().item())
