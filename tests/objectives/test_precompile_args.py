"""The compile pool's warm-up passes what the launcher passes, so it fills the cache with the
binary the launch will look up (a warm-up with other arguments compiles in vain, silently:
its errors are only reported, the worker then compiles itself)."""

from __future__ import annotations

import math

import pytest
import torch

import flashtune.kernels.attention as attention
import flashtune.kernels.lean as lean
from flashtune.kernels import Config
from flashtune.objectives.precompile import _compile
from flashtune.objectives.types import Workload


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((args, kwargs))

    def warmup(self, *args, grid, **kwargs) -> None:
        self.calls.append((args, kwargs))


def _summary(args: tuple) -> list:
    # Tensors: their dtype (warm-up buffers are stand-ins); descriptors: what the launch
    # passes of them (shape, strides, block); numbers as they are.
    from triton.tools.tensor_descriptor import TensorDescriptor

    return [a.dtype if isinstance(a, torch.Tensor)
            else (a.base.dtype, list(a.shape), list(a.strides), a.block_shape) if isinstance(a, TensorDescriptor)
            else round(a, 6) if isinstance(a, float) else a for a in args]


@pytest.mark.parametrize("config", [
    Config(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2, loads="tma", use_fp8=False, grid="persistent"),
    Config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3, loads="pointer", use_fp8=True),
    Config(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, loads="lean_ws", use_fp8=False, grid="persistent",
           tile_order="longest_first"),
    Config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2, loads="lean_overlap", use_fp8=True),
    Config(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, loads="tma", use_fp8=False, tile_order="longest_first"),
], ids=["bf16-persistent", "fp8-implied-grid", "lean-ws-persistent", "lean-overlap-fp8", "tma-longest-first"])
def test_warmup_arguments_match_the_launch(config, monkeypatch) -> None:
    w = Workload(2, 8, 2, 200, 333, 64, "float16", causal=True)
    recorder = _Recorder()
    # Launch and warm-up pick their kernel by the lengths (launch_support.LengthTwins).
    monkeypatch.setattr(attention, "forward_kernel_for", lambda q_len, kv_len: recorder)
    monkeypatch.setattr(lean, "_LEAN_KERNEL", lambda q_len, kv_len: recorder)
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, device=None, **k: empty(*a, **k))  # no GPU here
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0), raising=False)

    error, _ = _compile(config.to_dict(), w.to_dict())
    assert error == ""
    q = torch.randn(w.batch, w.q_heads, w.q_len, w.head_dim).to(torch.float16)
    k, v = (torch.randn(w.batch, w.kv_heads, w.kv_len, w.head_dim).to(torch.float16) for _ in range(2))
    attention.launch(q, k, v, torch.empty_like(q), causal=True, scale=1 / math.sqrt(w.head_dim), config=config)

    (warm_args, warm_kwargs), (launch_args, launch_kwargs) = recorder.calls
    assert _summary(warm_args) == _summary(launch_args)
    assert warm_kwargs == launch_kwargs
