"""launch_quantized (fp8 on pre-quantized inputs) computes what the quantizing launch does."""

import math

import pytest
import torch

from flashtune.kernels import Config
from flashtune.kernels.attention import launch, launch_quantized, quantize_fp8

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter; the GPU path is timed by bench_fp8")


@pytest.mark.parametrize("loads", ["pointer", "tma", "lean_ws_oneloop"])
def test_prequantized_launch_matches_quantizing_launch(loads):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 40, 64, generator=g).to(torch.float16) for _ in range(3))
    config = Config(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2, loads=loads, use_fp8=True)
    scale = 1 / math.sqrt(64)
    a, b = torch.full_like(q, float("nan")), torch.full_like(q, float("nan"))
    launch(q, k, v, a, causal=True, scale=scale, config=config)
    launch_quantized(*quantize_fp8(q, k, v), b, causal=True, scale=scale, config=config)
    assert torch.isfinite(b).all()
    assert torch.equal(a, b)


def test_prequantized_launch_refuses_a_bf16_config():
    q = torch.randn(1, 1, 16, 64).to(torch.float16)
    config = Config(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2, loads="pointer", use_fp8=False)
    with pytest.raises(ValueError, match="use_fp8"):
        launch_quantized(q, q, q, q, q, causal=False, scale=0.1, config=config)
