"""The packed variable-length prefill op (FlashAttention's ``flash_attn_varlen_func`` layout):
validate the packed inputs and their cumulative lengths, launch kernels/_flash_fwd_varlen.py.

Continuous batching packs the prompts of a step end to end, without padding; the dense op
would need them padded to one length, which is the work and the memory this op saves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import triton

from flashtune.kernels._flash_fwd_varlen import varlen_forward_kernel
from flashtune.kernels.attention import SUPPORTED_DTYPES, check_qkv_agree, resolve_scale
from flashtune.kernels.config import Config, Value
from flashtune.kernels.dtypes import interpreting
from flashtune.kernels.launch_support import LOG2_E, capturing
from flashtune.kernels.space import SUPPORTED_HEAD_DIMS

# The kernel's space, declared in space.py (torch-free: the store validates varlen entries).
from flashtune.kernels.space import VARLEN_DEFAULT as VARLEN_DEFAULT
from flashtune.kernels.space import VARLEN_FIXED as VARLEN_FIXED
from flashtune.kernels.space import VARLEN_TUNABLES as VARLEN_TUNABLES
from flashtune.kernels.space import config_in_space as config_in_space
from flashtune.kernels.space import validate_varlen_config as validate_varlen_config


def check_head_tensor(name: str, t: Any, layout: str, rank: int = 3) -> None:
    """Raise naming ``name`` unless it is a ``layout`` tensor of ``rank`` dims, head_dim last
    and contiguous, in a dtype the kernels read (the packed layout's check, and the paged
    cache's in kernels/paged.py)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"{name} must have rank {rank} {layout}, got shape {tuple(t.shape)}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name}.dtype must be float16, bfloat16 or float32, got {t.dtype}")
    if t.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dim (head_dim), got strides {t.stride()}")


def check_varlen_inputs(q: Any, k: Any, v: Any) -> None:
    """Raise TypeError/ValueError naming the argument when packed q, k, v cannot be attended."""
    check_head_tensor("q", q, "(total_q, q_heads, head_dim)")
    check_head_tensor("k", k, "(total_k, kv_heads, head_dim)")
    check_head_tensor("v", v, "(total_k, kv_heads, head_dim)")
    check_qkv_agree(q, k, v)
    head_dim = q.shape[2]
    if k.shape[2] != head_dim:
        raise ValueError(f"k head_dim {k.shape[2]} differs from q head_dim {head_dim}")
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {list(SUPPORTED_HEAD_DIMS)}, got {head_dim}")
    q_heads, kv_heads = q.shape[1], k.shape[1]
    if q_heads == 0 or kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(f"q heads ({q_heads}) must be a positive multiple of k/v heads ({kv_heads})")
    if q.device.type == "cpu" and not interpreting():
        raise ValueError("q is on the CPU: move it to a CUDA device, or set TRITON_INTERPRET=1 to run the interpreter")



def check_cu_seqlens(name: str, cu_seqlens: Any, rows: int, rows_name: str,
                     device: torch.device, read: bool = True) -> torch.Tensor | None:
    """Raise ValueError naming ``name`` unless it is an int32 1-D tensor on ``device`` of
    cumulative lengths: starting at 0, never decreasing, ending at most at ``rows`` (the
    packed tensor's rows; rows past the last sequence are padding, as transformers' continuous
    batching pads a step to a captured graph's size, and are left as they are). Returns the per-sequence lengths, or None inside CUDA-graph capture.

    The values are read on the host (one synchronization). Inside capture a host read is
    illegal, so they go unchecked there; the kernel clamps them to the buffers, so a bad
    value gives wrong attention, never an out-of-bounds access.
    """
    if not isinstance(cu_seqlens, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of int32, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype != torch.int32:
        raise ValueError(f"{name}.dtype must be torch.int32, got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() == 0:
        raise ValueError(f"{name} must be 1-D with batch + 1 entries, got shape {tuple(cu_seqlens.shape)}")
    if cu_seqlens.device != device:
        raise ValueError(f"{name} must be on q's device {device}, got {cu_seqlens.device}")
    if not read or capturing(device):
        return None
    values = cu_seqlens.cpu()
    if int(values[0]) != 0:
        raise ValueError(f"{name}[0] must be 0, got {int(values[0])}")
    lengths = values[1:] - values[:-1]
    falls = torch.nonzero(lengths < 0)
    if falls.numel():
        b = int(falls[0, 0])
        raise ValueError(f"{name} must not decrease, got {name}[{b}] = {int(values[b])} > "
                         f"{name}[{b + 1}] = {int(values[b + 1])}")
    if int(values[-1]) > rows:
        raise ValueError(f"{name}[-1] = {int(values[-1])} must be at most {rows_name} = {rows} (the packed rows)")
    return lengths


def check_max_seqlen(name: str, max_seqlen: Any, lengths: torch.Tensor | None, what: str) -> None:
    """Raise ValueError naming ``name`` unless it is an int >= 0 and at least every
    sequence's length (the grid is sized by it: a shorter one would leave rows unwritten)."""
    if not isinstance(max_seqlen, int) or isinstance(max_seqlen, bool) or max_seqlen < 0:
        raise ValueError(f"{name} must be an int >= 0, got {max_seqlen!r}")
    if lengths is not None and lengths.numel():
        longest = int(lengths.max())
        if max_seqlen < longest:
            b = int(torch.argmax(lengths))
            raise ValueError(f"{name} = {max_seqlen} is shorter than sequence {b}'s {longest} {what}")


def flash_attention_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    scale: float | None = None,
    config: Mapping[str, Value] | None = None,
    check_lengths: bool = True,
    pack_gqa: bool | None = None,
    grid_by: str | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention, forward, over packed sequences of different lengths.

    Args:
        q: (total_q, q_heads, head_dim), float16/bfloat16 (float32 for the interpreter):
            every sequence's queries end to end.
        k: (total_k, kv_heads, head_dim); q_heads must be a multiple of kv_heads.
        v: same shape as k.
        cu_seqlens_q: int32 (batch + 1,) on q's device: sequence b's queries are rows
            [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q; starts at 0, ends at most at
            total_q (rows past it are padding: their output is left unwritten).
        cu_seqlens_k: the same for k and v (ends at most at total_k); a sequence may have more keys
            than queries (chunked prefill: the keys of its cached prefix come first).
        max_seqlen_q: at least the longest sequence's queries (sizes the grid).
        max_seqlen_k: at least the longest sequence's keys (FlashAttention's signature;
            checked, not needed by this kernel).
        causal: query i of a sequence with q_len queries and k_len keys sees keys
            j <= i + k_len - q_len (aligned bottom-right); a row that sees no key (or a
            sequence with no keys) gives zeros.
        scale: softmax scale; 1/sqrt(head_dim) when None.
        check_lengths: read the cumulative lengths on the host to check them (one
            synchronization). False for a caller whose lengths are right by construction
            (transformers' continuous batching, every layer of every step): the kernel
            clamps them to the buffers, so even wrong ones never read or write outside.
        config: the kernel's tile (``VARLEN_TUNABLES``: BLOCK_M, BLOCK_N, num_warps,
            num_stages; a prefill config of pointer loads is accepted too). None: the
            prefill kernel's safe default tile.
        pack_gqa: a tile's rows hold a K/V group's query heads (:func:`launch_varlen`);
            None: :data:`PACK_GQA`. The same output either way.
        grid_by: how many tiles the launch has (:func:`tiles_by`: "longest", "tokens" or
            "auto"); None: :data:`GRID_BY`. The same output either way.

    Returns:
        (total_q, q_heads, head_dim) in q's dtype.

    Raises:
        TypeError, ValueError: bad inputs or config, naming the argument. The cumulative
            lengths are checked on the host (one synchronization), except while a CUDA
            graph is captured (the kernel then clamps them to the buffers).
    """
    check_varlen_inputs(q, k, v)
    lengths_q = check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], "total_q (q.shape[0])", q.device,
                                 read=check_lengths)
    lengths_k = check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, k.shape[0], "total_k (k.shape[0])", q.device,
                                 read=check_lengths)
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must have one entry per sequence plus one, "
                         f"got {cu_seqlens_q.numel()} and {cu_seqlens_k.numel()} entries")
    check_max_seqlen("max_seqlen_q", max_seqlen_q, lengths_q, "queries")
    check_max_seqlen("max_seqlen_k", max_seqlen_k, lengths_k, "keys")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if grid_by is not None and grid_by not in GRIDS_BY:
        raise ValueError(f"grid_by must be one of {list(GRIDS_BY)} or None, got {grid_by!r}")
    scale_value = resolve_scale(scale, q.shape[2])
    cfg = VARLEN_DEFAULT if config is None else validate_varlen_config(config)

    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    batch = cu_seqlens_q.numel() - 1
    if batch == 0 or max_seqlen_q == 0 or q.shape[0] == 0:
        return out  # no query rows: nothing to launch
    launch_varlen(q, k, v, out, cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous(), max_seqlen_q,
                  causal=causal, scale=scale_value, config=cfg, pack_gqa=pack_gqa, grid_by=grid_by)
    return out


def launch_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, cu_seqlens_q: torch.Tensor,
                  cu_seqlens_k: torch.Tensor, max_seqlen_q: int, *, causal: bool, scale: float,
                  config: Config, pack_gqa: bool | None = None, grid_by: str | None = None) -> Any:
    """Launch the varlen kernel into ``out`` with validated inputs and config: one program
    per query tile (:func:`tiles_by`) for every query head, or with ``pack_gqa`` for every
    K/V head, a tile's rows the group's query heads of its queries (where the group's size
    divides BLOCK_M; None: :data:`PACK_GQA`)."""
    batch = cu_seqlens_q.numel() - 1
    q_heads, head_dim = q.shape[1], q.shape[2]
    block_m, kv_group = int(config["BLOCK_M"]), q_heads // k.shape[1]
    group = packed_group(kv_group, block_m) if (PACK_GQA if pack_gqa is None else pack_gqa) else 1
    tiles, by_tokens = tiles_by(GRID_BY if grid_by is None else grid_by, max_seqlen_q, q.shape[0], batch,
                                block_m // group)
    grid = (tiles * (q_heads // group),)
    wide = any(last_offset(t) >= INT32_OFFSETS for t in (q, k, v, out))
    return varlen_forward_kernel[grid](
        q, k, v, out, cu_seqlens_q, cu_seqlens_k,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        batch, q_heads, kv_group, q.shape[0], k.shape[0], max_seqlen_q, scale * LOG2_E,
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=config["BLOCK_N"], IS_CAUSAL=causal,
        WIDE_OFFSETS=wide, PACK_GQA=group, BY_TOKENS=by_tokens, num_warps=config["num_warps"],
        num_stages=config["num_stages"],
    )


#: How the op sizes the varlen kernel's grid (:func:`tiles_by`). "longest" until timed on a GPU:
#: docs/lab/gpu/varlen_grid_probe.py.
GRID_BY = "longest"
GRIDS_BY = ("longest", "tokens", "auto")


def tiles_by(grid_by: str, max_seqlen_q: int, total_q: int, batch: int, queries: int) -> tuple[int, bool]:
    """(query tiles a head, whether they are slots by packed rows) of a launch whose tiles cover
    ``queries`` query positions.

    "longest": cdiv(max_seqlen_q, queries) tiles for every sequence, the tiles past a shorter
    sequence's rows exiting at once: every sequence pays for the longest one. A continuous
    batch's step that prefills one long chunk beside many decoding sequences launches
    mostly such programs, and transformers pads a CUDA-graph step's ``max_seqlen_q`` to all
    its rows. "tokens": total_q // queries + batch slots, in packed-row order (the kernel's
    ``first_slot``), each tile finding its sequence among the cumulative lengths: at most one
    idle slot a sequence, for one more read in each tile's prologue. "auto": "tokens" where it
    launches at most half the programs "longest" does. From shapes and host integers only, so a
    captured graph's replays keep the choice.
    """
    longest, tokens = triton.cdiv(max_seqlen_q, queries) * batch, total_q // queries + batch
    if grid_by == "tokens" or (grid_by == "auto" and 2 * tokens <= longest):
        return tokens, True
    return longest, False


#: Whether the op packs a K/V group's query heads into a tile's rows (``launch_varlen``'s
#: ``pack_gqa``). Off until timed on a GPU: docs/lab/gpu/varlen_pack_probe.py.
PACK_GQA = False


def packed_group(kv_group: int, block_m: int) -> int:
    """The query heads a packed tile holds: the K/V group's, where they divide the tile's
    rows (a tile covers whole queries); else 1 (not packed)."""
    return kv_group if kv_group > 1 and block_m % kv_group == 0 else 1


#: Element offsets from this on need 64-bit arithmetic in the kernel (``WIDE_OFFSETS``).
INT32_OFFSETS = 2**31


def last_offset(t: torch.Tensor) -> int:
    """The element offset of ``t``'s last element from its first: decided from the buffers'
    sizes alone, so a CUDA graph's replays (same buffers, new lengths) keep the choice right."""
    if t.numel() == 0:
        return 0
    return sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
