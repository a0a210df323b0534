"""Float32 reference attention with the kernel's exact semantics, chunked to bound memory.

Same contract as the kernel: grouped-query heads, causal aligned bottom-right, rows that
see no key give zeros. Used by the tests and by the objective's per-config check.
"""

from __future__ import annotations

import math

import torch

# Scores per chunk are (batch, heads, rows, kv_len) float32; keep a chunk near 512 MiB.
_CHUNK_BYTES = 512 * 2**20


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    """Attention in float32 (true fp32 matmuls, no TF32); returns float32."""
    batch, q_heads, q_len, head_dim = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    group = q_heads // kv_heads
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    rows = max(1, _CHUNK_BYTES // (4 * batch * q_heads * kv_len))
    cols = torch.arange(kv_len, device=q.device)
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for start in range(0, q_len, rows):
            stop = min(start + rows, q_len)
            scores = torch.matmul(q[:, :, start:stop].float(), kf.transpose(-1, -2)) * scale
            if causal:
                offset = kv_len - q_len
                qi = torch.arange(start, stop, device=q.device)
                keep = cols[None, :] <= qi[:, None] + offset
                scores = scores.masked_fill(~keep, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            probs = torch.nan_to_num(probs, nan=0.0)  # rows with no visible key
            out[:, :, start:stop] = torch.matmul(probs, vf)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    return out


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float32; NaN or inf anywhere in ``out`` gives inf."""
    out_f = out.float()
    if not torch.isfinite(out_f).all():
        return math.inf
    denom = torch.linalg.vector_norm(ref).item()
    diff = torch.linalg.vector_norm(out_f - ref).item()
    return diff / denom if denom > 0 else diff
