"""Bad inputs raise TypeError/ValueError naming the argument, never a Triton traceback."""

import pytest
import torch

from flashtune.kernels import Config, flash_attention, validate_config

GOOD = dict(q=(1, 2, 8, 32), k=(1, 2, 8, 32), v=(1, 2, 8, 32))


def _t(shape, dtype=torch.float16):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize(
    "q,k,v,exc,match",
    [
        ((2, 8, 32), (1, 2, 8, 32), (1, 2, 8, 32), ValueError, "q must have rank 4"),
        ((1, 2, 8, 32), (1, 2, 8, 32), (1, 2, 9, 32), ValueError, "k and v must have the same shape"),
        ((1, 2, 8, 48), (1, 2, 8, 48), (1, 2, 8, 48), ValueError, "head_dim must be one of"),
        ((1, 3, 8, 32), (1, 2, 8, 32), (1, 2, 8, 32), ValueError, r"multiple of k/v heads"),
        ((2, 2, 8, 32), (1, 2, 8, 32), (1, 2, 8, 32), ValueError, "batch"),
        ((1, 2, 8, 64), (1, 2, 8, 32), (1, 2, 8, 32), ValueError, "head_dim"),
        ((1, 2, 0, 32), (1, 2, 8, 32), (1, 2, 8, 32), ValueError, "empty"),
    ],
)
def test_shapes(q, k, v, exc, match):
    with pytest.raises(exc, match=match):
        flash_attention(_t(q), _t(k), _t(v))


def test_dtype_mismatch_and_unsupported():
    q, k, v = (_t(GOOD[n]) for n in "qkv")
    with pytest.raises(TypeError, match="share one dtype"):
        flash_attention(q, k.float(), v)
    with pytest.raises(TypeError, match=r"q.dtype must be"):
        flash_attention(q.to(torch.int32), k, v)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        flash_attention(q.numpy(), k, v)


def test_last_dim_not_contiguous():
    q = _t((1, 2, 32, 8)).transpose(-1, -2)
    k, v = _t(GOOD["k"]), _t(GOOD["v"])
    with pytest.raises(ValueError, match="contiguous in its last dim"):
        flash_attention(q, k, v)


@pytest.mark.parametrize(
    "config,match",
    [
        ({"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "BLOCK_K": 8}, "unknown key"),
        ({"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4}, "missing key"),
        ({"BLOCK_M": 48, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}, "BLOCK_M=48"),
        ({"BLOCK_M": 64.0, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}, "BLOCK_M"),
    ],
)
def test_bad_configs(config, match):
    q, k, v = (_t(GOOD[n]) for n in "qkv")
    with pytest.raises(ValueError, match=match):
        flash_attention(q, k, v, config=config)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_scale(scale):
    q, k, v = (_t(GOOD[n]) for n in "qkv")
    with pytest.raises(ValueError, match="scale"):
        flash_attention(q, k, v, scale=scale)


def test_causal_must_be_bool():
    q, k, v = (_t(GOOD[n]) for n in "qkv")
    with pytest.raises(TypeError, match="causal"):
        flash_attention(q, k, v, causal="yes")


def test_validate_config_returns_config():
    cfg = validate_config({"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2})
    complete = Config(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2, loads="pointer", use_fp8=False, grid="tiles",
                      tile_order="head_major", kernel="prefill")
    assert isinstance(cfg, Config) and hash(cfg) == hash(complete)


@pytest.mark.parametrize(
    "config,match",
    [
        (dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, loads="tma_ws"), "PassManager::run failed"),
        (dict(BLOCK_M=128, BLOCK_N=32, num_warps=4, num_stages=3, loads="tma_ws", grid="persistent",
              tile_order="longest_first"), "PassManager::run failed"),
    ],
)
def test_configs_known_to_fail_are_refused_with_the_reason(config, match):
    """The op names the config and the measured reason instead of Triton's bare error."""
    q, k, v = (_t(GOOD[n]) for n in "qkv")
    with pytest.raises(ValueError, match=match) as info:
        flash_attention(q, k, v, config=config)
    assert "cannot run" in str(info.value) and f"'loads': '{config['loads']}'" in str(info.value)
