"""The benchmark's torch varlen peer off the GPU: it says in one line why it cannot run, and
what torch's varlen attention cannot compute (a window, soft-capping) runs the op's PyTorch
fallback with the same answer. (Its CUDA path: tests/gpu/test_continuous_batching_gpu.py.)"""

from __future__ import annotations

import pytest
import torch

from flashtune.experiments.benchmarks import bench_continuous_batching, torch_varlen
from flashtune.runtime.integrations.hf_continuous_batching import packed_sdpa


def test_without_cuda_the_peer_says_why_in_one_line() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine runs it")
    reason = torch_varlen.available()
    assert reason and "\n" not in reason and ("CUDA" in reason or "varlen" in reason)


def test_a_window_or_soft_capping_runs_the_fallback() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(9, 4, 32), torch.randn(12, 2, 32), torch.randn(12, 2, 32)
    cu_q, cu_k = torch.tensor([0, 4, 9], dtype=torch.int32), torch.tensor([0, 5, 12], dtype=torch.int32)
    out = torch_varlen.torch_varlen_attention(q, k, v, cu_q, cu_k, 5, 7, causal=True, window_size=(2, 0))
    assert torch.equal(out, packed_sdpa(q, k, v, cu_q, cu_k, scale=None, causal=True, window=3))
    capped = torch_varlen.torch_varlen_attention(q, k, v, cu_q, cu_k, 5, 7, causal=True, softcap=30.0)
    assert torch.equal(capped, packed_sdpa(q, k, v, cu_q, cu_k, scale=None, causal=True, softcap=30.0))


def test_the_benchmark_names_the_peer_among_its_implementations() -> None:
    assert "torch-varlen" in bench_continuous_batching.IMPLEMENTATIONS
    assert "flash" in torch_varlen.NAME and not any(d in torch_varlen.NAME.split("flash", 1)[1] for d in "23")
