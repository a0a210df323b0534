"""The peer of the packed kernel: torch's own varlen attention (``torch.nn.attention.varlen``),
called by FlashAttention's ``flash_attn_varlen_func`` signature, so that transformers'
continuous batching runs it through the same path as the op (``hf_continuous_batching.register(
name, varlen=torch_varlen_attention)``) and the kernel-level benchmark times it beside ours.

torch 2.9-2.11's ``varlen_attn`` takes ``is_causal`` and as many K/V heads as query heads (K and V
are repeated to them here: part of what using it costs); later ones take ``window_size`` and
``enable_gqa``. It runs on CUDA only. What it cannot compute here (dropout, soft-capping, sinks, a
sliding window) runs ``packed_sdpa``, request by request, as the op's fallback does.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from flashtune.runtime.integrations.hf_continuous_batching import packed_sdpa

#: The name transformers' continuous batching is given for the peer ("flash", no 2 or 3 after it).
NAME = "flash_torch_varlen"


def available() -> str | None:
    """None when this torch has a varlen attention that runs here, else why not (one line)."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError as exc:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen ({exc})"
    if not torch.cuda.is_available():
        return "torch's varlen attention runs on CUDA only"
    return None


def torch_varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                           softmax_scale: float | None = None, causal: bool = True, window_size: Any = (-1, -1),
                           softcap: float = 0.0, s_aux: Any = None, **_: Any) -> torch.Tensor:
    """``flash_attn_varlen_func`` on torch's varlen attention: q (total_q, q_heads, D), k and v
    (total_k, kv_heads, D), int32 cumulative lengths; returns (total_q, q_heads, D)."""
    window = window_size[0] if isinstance(window_size, (tuple, list)) else window_size
    if dropout_p or softcap or s_aux is not None or (window is not None and window >= 0):
        return packed_sdpa(q, k, v, cu_seqlens_q, cu_seqlens_k, scale=softmax_scale, causal=causal,
                           window=None if window is None or window < 0 else window + 1, softcap=softcap or None,
                           sinks=s_aux)
    from torch.nn.attention.varlen import varlen_attn  # CUDA builds only; checked by available()

    parameters = inspect.signature(varlen_attn).parameters
    options: dict[str, Any] = {}
    if "enable_gqa" in parameters:
        options["enable_gqa"] = True
    elif q.shape[1] != k.shape[1]:
        k, v = (x.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for x in (k, v))
    if "is_causal" in parameters:
        options["is_causal"] = causal
    else:
        options["window_size"] = (-1, 0) if causal else (-1, -1)
    if softmax_scale is not None:
        options["scale"] = softmax_scale
    cu_q, cu_k = cu_seqlens_q.to(torch.int32), cu_seqlens_k.to(torch.int32)
    return varlen_attn(q, k, v, cu_q, cu_k, int(max_seqlen_q), int(max_seqlen_k), **options)
