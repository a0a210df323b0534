"""Attention against a paged KV cache, FlashAttention's ``flash_attn_with_kvcache`` with a
block table (the subset transformers' continuous batching calls for decode): validate,
append the new keys into their pages, launch kernels/_flash_decode_paged.py.

Continuous batching keeps every sequence's cache in fixed-size pages of one pool, addressed
through a per-sequence block table, so sequences grow without copies and without a dense
(batch, capacity) cache padded to the longest; the dense decode kernel cannot read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import triton

from flashtune.kernels._flash_decode import decode_combine_kernel
from flashtune.kernels._flash_decode_paged import paged_append_kernel, paged_split_kernel
from flashtune.kernels.attention import SUPPORTED_HEAD_DIMS, resolve_scale
from flashtune.kernels.config import Config, Value
from flashtune.kernels.decode import INTERPRETER_SMS, combine_options, decode_default_for
from flashtune.kernels.dtypes import interpreting
from flashtune.kernels.launch_support import LOG2_E, capturing, device_sm_count
from flashtune.kernels.space import PAGE_SIZE_MULTIPLE as PAGE_SIZE_MULTIPLE
from flashtune.kernels.space import PAGED_KERNEL as PAGED_KERNEL
from flashtune.kernels.space import PAGED_KNOBS as PAGED_KNOBS
from flashtune.kernels.space import PAGED_TUNABLES, decode_block_h, validate_paged_config
from flashtune.kernels.varlen import check_head_tensor

#: New keys written per program of the append kernel.
APPEND_BLOCK_M = 16


def default_paged_config(*, batch: int, q_heads: int, kv_heads: int, q_len: int, capacity: int, head_dim: int,
                         device: torch.device) -> Config:
    """The config used without one: the dense decode kernel's default for the same rows
    (its tile, warps, stages and split rule, fitted on the H200) at the block table's
    capacity, since the lengths are not read on the host. Untuned for paging itself."""
    sms = device_sm_count(device) if device.type == "cuda" else INTERPRETER_SMS
    dense = decode_default_for(batch=batch, q_heads=q_heads, kv_heads=kv_heads, q_len=q_len, kv_len=capacity,
                               head_dim=head_dim, sm_count=sms, per_sequence_lengths=True)
    return Config({name: dense[name] for name in PAGED_TUNABLES})


def _check_like_q(name: str, t: torch.Tensor, q: torch.Tensor) -> None:
    if t.dtype != q.dtype:
        raise TypeError(f"{name}.dtype {t.dtype} differs from q.dtype {q.dtype}")
    if t.device != q.device:
        raise ValueError(f"{name} must be on q's device {q.device}, got {t.device}")


def _check_int32(name: str, t: Any, shape: tuple[int, ...], layout: str, device: torch.device) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of int32, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise ValueError(f"{name}.dtype must be torch.int32, got {t.dtype}")
    if t.dim() != len(shape) or any(want is not None and got != want for got, want in zip(t.shape, shape)):
        raise ValueError(f"{name} must have shape {layout}, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on q's device {device}, got {t.device}")


def check_paged_inputs(q: Any, k_cache: Any, v_cache: Any, k: Any, v: Any, cache_seqlens: Any,
                       block_table: Any) -> None:
    """Raise TypeError/ValueError naming the argument when the shapes, dtypes, devices or
    layouts cannot be attended (nothing here reads a tensor's values)."""
    check_head_tensor("q", q, "(batch, seqlen_q, q_heads, head_dim)", rank=4)
    check_head_tensor("k_cache", k_cache, "(num_pages, page_size, kv_heads, head_dim)", rank=4)
    check_head_tensor("v_cache", v_cache, "(num_pages, page_size, kv_heads, head_dim)", rank=4)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        _check_like_q(name, t, q)
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must have the same shape, got {tuple(k_cache.shape)} "
                         f"and {tuple(v_cache.shape)}")
    batch, _, q_heads, head_dim = q.shape
    num_pages, page_size, kv_heads, cache_dim = k_cache.shape
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {list(SUPPORTED_HEAD_DIMS)}, got q.shape[3] = {head_dim}")
    if cache_dim != head_dim:
        raise ValueError(f"k_cache head_dim {cache_dim} differs from q head_dim {head_dim}")
    if page_size == 0 or page_size % PAGE_SIZE_MULTIPLE:
        raise ValueError(f"k_cache page size (k_cache.shape[1]) must be a positive multiple of "
                         f"{PAGE_SIZE_MULTIPLE}, got {page_size}")
    if num_pages == 0:
        raise ValueError("k_cache has no pages (k_cache.shape[0] = 0)")
    if kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(f"q heads ({q_heads}) must be a positive multiple of k_cache heads ({kv_heads})")
    if (k is None) != (v is None):
        raise ValueError(f"k and v must be given together, got k={'None' if k is None else 'a tensor'} "
                         f"and v={'None' if v is None else 'a tensor'}")
    if k is not None:
        check_head_tensor("k", k, "(batch, seqlen_new, kv_heads, head_dim)", rank=4)
        check_head_tensor("v", v, "(batch, seqlen_new, kv_heads, head_dim)", rank=4)
        for name, t in (("k", k), ("v", v)):
            _check_like_q(name, t, q)
            if t.shape[0] != batch or t.shape[2:] != k_cache.shape[2:]:
                raise ValueError(f"{name} must have shape (batch, seqlen_new, kv_heads, head_dim) = "
                                 f"({batch}, seqlen_new, {kv_heads}, {head_dim}), got {tuple(t.shape)}")
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    _check_int32("cache_seqlens", cache_seqlens, (batch,), f"(batch,) = ({batch},)", q.device)
    _check_int32("block_table", block_table, (batch, None), f"(batch, max_pages_per_seq) = ({batch}, ...)",
                 q.device)
    if q.device.type == "cpu" and not interpreting():
        raise ValueError("q is on the CPU: move it to a CUDA device, or set TRITON_INTERPRET=1 to run the interpreter")


def check_paged_values(cache_seqlens: torch.Tensor, block_table: torch.Tensor, *, seqlen_new: int, page_size: int,
                       num_pages: int) -> None:
    """Raise ValueError naming the argument unless every cached length is >= 0, every
    sequence's keys after the append fit its block-table row, and every table entry of a
    page the call reads or writes is a page of the cache (entries past a sequence's pages
    may be anything: -1 by convention). Reads both tensors on the host (one synchronization)."""
    batch = cache_seqlens.numel()
    values = torch.cat([cache_seqlens, block_table.reshape(-1)]).cpu()  # one copy: one synchronization
    lengths, table = values[:batch], values[batch:].view(block_table.shape)
    if lengths.numel() and int(lengths.min()) < 0:
        b = int(torch.argmin(lengths))
        raise ValueError(f"cache_seqlens must be >= 0, got cache_seqlens[{b}] = {int(lengths[b])}")
    capacity = table.shape[1] * page_size
    totals = lengths.long() + seqlen_new
    over = torch.nonzero(totals > capacity)
    if over.numel():
        b = int(over[0, 0])
        raise ValueError(f"cache_seqlens[{b}] + seqlen_new = {int(totals[b])} keys do not fit the block table's "
                         f"{table.shape[1]} pages of {page_size} (block_table.shape[1] x page size = {capacity})")
    used = torch.arange(table.shape[1])[None, :] < (totals[:, None] + page_size - 1) // page_size
    bad = torch.nonzero(used & ((table < 0) | (table >= num_pages)))
    if bad.numel():
        b, j = (int(x) for x in bad[0])
        raise ValueError(f"block_table[{b}, {j}] = {int(table[b, j])} is not a page of the cache "
                         f"[0, {num_pages}) but sequence {b} uses its page {j}")



def flash_attention_with_kvcache(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor | None = None,
    v: torch.Tensor | None = None, *, cache_seqlens: torch.Tensor, block_table: torch.Tensor, causal: bool = True,
    softmax_scale: float | None = None, config: Mapping[str, Value] | None = None, check_values: bool = True,
) -> torch.Tensor:
    """Attention of new queries against a paged KV cache, appending new keys first.

    Args:
        q: (batch, seqlen_q, q_heads, head_dim), float16/bfloat16 (float32 for the
            interpreter); head_dim 32, 64, 128 or 256.
        k_cache: (num_pages, page_size, kv_heads, head_dim), q's dtype and device: the page
            pool (transformers' and vLLM's page views); page_size a multiple of 16.
            q_heads must be a multiple of kv_heads. Written in place when ``k`` is given.
        v_cache: same shape as k_cache.
        k, v: optional (batch, seqlen_new, kv_heads, head_dim): written into the cache at
            positions cache_seqlens[b] .. + seqlen_new of sequence b (through its block
            table), before attending; both or neither.
        cache_seqlens: int32 (batch,): keys already in the cache per sequence. Sequence b
            attends to its first cache_seqlens[b] + seqlen_new keys (0 gives zeros).
        block_table: int32 (batch, max_pages_per_seq): sequence b's key j is on page
            block_table[b, j // page_size]; entries past its pages may be -1.
        causal: query i sees keys j <= i + keys - seqlen_q (aligned bottom-right).
        softmax_scale: 1/sqrt(head_dim) when None.
        config: ``PAGED_TUNABLES`` (BLOCK_N, num_splits, num_warps, num_stages; may name
            ``kernel="paged"``); None: :func:`default_paged_config`.
        check_values: read cache_seqlens and block_table on the host to check them (one
            synchronization; skipped inside CUDA-graph capture). False for a caller whose
            values are right by construction (transformers' continuous batching, every
            layer of every step): the kernels clamp them, so wrong ones never read or
            write outside the cache, the table or the outputs.

    Returns:
        (batch, seqlen_q, q_heads, head_dim) in q's dtype.

    Raises:
        TypeError, ValueError: bad inputs or config, naming the argument.
    """
    check_paged_inputs(q, k_cache, v_cache, k, v, cache_seqlens, block_table)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    scale = resolve_scale(softmax_scale, q.shape[3])
    batch, q_len, q_heads, head_dim = q.shape
    num_pages, page_size, kv_heads, _ = k_cache.shape
    seqlen_new = 0 if k is None else k.shape[1]
    if config is not None:
        cfg = validate_paged_config(config)
    else:
        cfg = default_paged_config(batch=batch, q_heads=q_heads, kv_heads=kv_heads, q_len=q_len,
                                   capacity=block_table.shape[1] * page_size, head_dim=head_dim, device=q.device)
    if check_values and not capturing(q.device):
        check_paged_values(cache_seqlens, block_table, seqlen_new=seqlen_new, page_size=page_size,
                           num_pages=num_pages)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    launch_paged(q, k_cache, v_cache, k, v, out, cache_seqlens.contiguous(), block_table.contiguous(),
                 causal=causal, scale=scale, config=cfg)
    return out


def launch_paged(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor | None,
                 v: torch.Tensor | None, out: torch.Tensor, cache_seqlens: torch.Tensor, block_table: torch.Tensor,
                 *, causal: bool, scale: float, config: Config) -> None:
    """The append (when ``k`` is given), the split kernel and, past one split, the combine,
    on validated inputs (cache_seqlens and block_table contiguous). No host read: capturable
    in a CUDA graph (the split workspace is then allocated from the graph's pool)."""
    batch, q_len, q_heads, head_dim = q.shape
    num_pages, page_size, kv_heads, _ = k_cache.shape
    max_pages = block_table.shape[1]
    seqlen_new = 0 if k is None else k.shape[1]
    if batch == 0 or max_pages == 0:
        out.zero_()  # no sequence, or none with room for a key: nothing to write or attend
        return
    if seqlen_new:
        # Before the split kernel, on the same stream: its reads see the new keys.
        paged_append_kernel[(batch * kv_heads, triton.cdiv(seqlen_new, APPEND_BLOCK_M))](
            k, v, k_cache, v_cache, cache_seqlens, block_table,
            *k.stride()[:3], *v.stride()[:3], *k_cache.stride()[:3], *v_cache.stride()[:3], block_table.stride(0),
            kv_heads, seqlen_new, num_pages, max_pages,
            HEAD_DIM=head_dim, BLOCK_M=APPEND_BLOCK_M, PAGE_SIZE=page_size, num_warps=4,
        )
    if q_len == 0:
        return
    kv_group = q_heads // kv_heads
    splits = int(config["num_splits"])
    block_h = decode_block_h(kv_group, q_len)
    if splits > 1:
        rows = batch * q_heads * q_len
        part_o = torch.empty(rows * splits * head_dim, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(rows * splits, dtype=torch.float32, device=q.device)
    else:
        # Not written (one split stores the output directly), but float32 as a workspace is,
        # so that one split and many share a compiled binary.
        part_o = part_lse = torch.empty(1, dtype=torch.float32, device=q.device)
    paged_split_kernel[(splits, batch * kv_heads, triton.cdiv(kv_group * q_len, block_h))](
        q, k_cache, v_cache, out, part_o, part_lse, cache_seqlens, block_table,
        *q.stride()[:3], *k_cache.stride()[:3], *v_cache.stride()[:3], *out.stride()[:3], block_table.stride(0),
        q_heads, kv_heads, kv_group, q_len, seqlen_new, num_pages, max_pages, splits, scale * LOG2_E,
        HEAD_DIM=head_dim, BLOCK_H=block_h, BLOCK_N=config["BLOCK_N"], PAGE_SIZE=page_size, IS_CAUSAL=causal,
        num_warps=config["num_warps"], num_stages=config["num_stages"],
    )
    if splits > 1:
        # The dense decode kernel's combine, handed out's (batch, head, position) strides:
        # the workspace rows are laid out as that kernel's.
        decode_combine_kernel[(batch * q_heads * q_len, triton.cdiv(head_dim, combine_options(head_dim)["BLOCK_D"]))](
            out, part_o, part_lse, out.stride(0), out.stride(2), out.stride(1), q_heads, q_len, splits,
            **combine_options(head_dim),
        )
