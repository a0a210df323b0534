"""The persistent grid (``grid="persistent"``): a few programs loop over all tiles.

Under the interpreter the launcher starts ``INTERPRETER_PROGRAMS`` (3) programs, and every
shape here has more tiles than that, so each program runs several tiles: the tile -> (batch,
head, query block) mapping, the causal order and the per-tile descriptors are all exercised.
"""

import math

import pytest
import torch

from flashtune.kernels import Config, flash_attention, validate_config
from flashtune.kernels.attention import INTERPRETER_PROGRAMS, compile_options, launch, launch_grid
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.objectives.bench import FP8_TOLERANCE

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter suite; tests/gpu covers the GPU")

TILES = Config(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2, loads="pointer", use_fp8=False, grid="tiles")
PERSISTENT = TILES.replace(grid="persistent")


def _qkv(b, hq, hkv, nq, nk, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, hq, nq, d, generator=g).to(torch.float16),
            torch.randn(b, hkv, nk, d, generator=g).to(torch.float16),
            torch.randn(b, hkv, nk, d, generator=g).to(torch.float16))


def _launch(q, k, v, causal, config):
    # NaN-filled output: a tile no program visits stays NaN.
    out = torch.full_like(q, float("nan"))
    launch(q, k, v, out, causal=causal, scale=1 / math.sqrt(q.shape[-1]), config=validate_config(config))
    return out


# A sample over the kernel's paths, each with more tiles than programs; names say what it covers.
CASES = {
    "pointer-full-gqa-tail": ("pointer", False, (2, 4, 2, 70, 70)),
    "pointer-causal-mqa-qlen<kvlen": ("pointer", True, (1, 4, 1, 45, 83)),
    "tma-causal-qlen>kvlen": ("tma", True, (2, 2, 2, 83, 45)),
    "tma-full-gqa-qlen<kvlen": ("tma", False, (1, 6, 3, 40, 97)),
    "tma_ws-causal-tail": ("tma_ws", True, (1, 3, 3, 100, 100)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_persistent_matches_reference_and_the_tiles_grid(case):
    loads, causal, (b, hq, hkv, nq, nk) = CASES[case]
    q, k, v = _qkv(b, hq, hkv, nq, nk, seed=len(case))
    tiles = math.ceil(nq / 32) * b * hq
    assert tiles > INTERPRETER_PROGRAMS
    assert launch_grid(PERSISTENT, q_len=nq, batch_heads=b * hq, device=q.device) == (INTERPRETER_PROGRAMS,)
    persistent = _launch(q, k, v, causal, PERSISTENT.replace(loads=loads))
    assert torch.isfinite(persistent).all(), "a tile was skipped"
    err = relative_error(persistent, reference_attention(q, k, v, causal=causal))
    assert err < 5e-3, f"relative error {err:.2e}"
    # Same tile body, same order of keys within a tile: bit for bit what one program per tile gives.
    assert torch.equal(persistent, _launch(q, k, v, causal, TILES.replace(loads=loads)))


@pytest.mark.parametrize("loads", ["pointer", "tma"])
def test_persistent_fp8_within_its_budget(loads):
    q, k, v = _qkv(1, 4, 2, 45, 70, d=64, seed=11)
    config = PERSISTENT.replace(loads=loads, use_fp8=True)
    out = flash_attention(q, k, v, causal=True, config=config)
    assert relative_error(out, reference_attention(q, k, v, causal=True)) < FP8_TOLERANCE


def test_fewer_tiles_than_programs_starts_one_program_per_tile():
    q, k, v = _qkv(1, 2, 1, 20, 20)
    assert launch_grid(PERSISTENT, q_len=20, batch_heads=2, device=q.device) == (2,)
    assert relative_error(_launch(q, k, v, True, PERSISTENT), reference_attention(q, k, v, causal=True)) < 5e-3


def test_a_config_without_grid_is_the_tiles_grid():
    """Tables, stores and priors recorded before the knob omit it; they measured the tiles grid."""
    old = {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "loads": "tma", "use_fp8": False}
    assert validate_config(old) == validate_config({**old, "grid": "tiles"})
    assert validate_config(old)["grid"] == "tiles"
    assert compile_options(Config(old), head_dim=32, causal=True) == compile_options(
        Config(old, grid="tiles"), head_dim=32, causal=True)
    assert launch_grid(Config(old), q_len=70, batch_heads=4, device=torch.device("cpu")) == (3, 4)
    q, k, v = _qkv(1, 2, 2, 40, 40)
    assert torch.equal(flash_attention(q, k, v, causal=True, config=old),
                       flash_attention(q, k, v, causal=True, config={**old, "grid": "tiles"}))
    with pytest.raises(ValueError, match="grid"):
        validate_config({**old, "grid": "waves"})
