"""Decode attention as two Triton kernels: split-KV partials, then one combine (or the
combine fused into the split kernel's last program: one launch a call).

Decode is few query rows (q_len 1 to DECODE_MAX_Q_LEN) against a long KV cache, so the
work is reading K and V once at memory speed. Two things decide that speed:

* Programs: one program per (batch, query head) gives B x Hq programs, 32 at batch 1 on
  132 SMs, each walking the whole cache alone. Here the keys of one sequence are cut into
  ``num_splits`` ranges of whole BLOCK_N tiles (flash-decoding), each range one program,
  so batch x kv_heads x num_splits programs stream the cache together.
* Re-reads: the kv_group query heads that share a KV head (grouped-query attention) are
  packed, with their q_len query rows, into one BLOCK_H-row query tile (row r is head
  r // q_len of the group, position r % q_len), so each K/V tile is loaded once per KV
  head rather than once per query head. Padding rows (BLOCK_H is at least 16 for tl.dot)
  cost registers and tensor-core time, not memory traffic.

Each split runs the prefill kernel's tile loop (``_attend_tiles``: online softmax in base 2
with the scale folded in, an unmasked loop over the tiles every row may fully see, then a
masked loop over the ragged tail and the causal band) and writes its rows' output already
divided by their sum, plus their log-sum-exp in base 2 (``-inf`` for a row that saw no key),
to a float32 workspace laid out (row, split, head_dim) so the combine reads each row's
splits contiguously. With one split the program writes the output directly.

K/V tiles come from pointer loads or, with ``USE_TMA``, from device-side tensor
descriptors (Hopper's TMA), as in the prefill kernel.

Per-sequence lengths (``HAS_SEQLENS``): sequence b attends to its first SeqLens[b] keys
of a cache of capacity ``kv_cap``; the length is clamped to [0, kv_cap] here, so a bad
value the launcher could not check (inside CUDA-graph capture) never reads out of bounds.
Causal masking is aligned bottom-right against that length: query i sees key j when
j <= i + (seqlen - q_len). Rows that see no key write zeros. With ``HAS_KV_START`` the
sequence's keys start at KvStart[b] (left padding), as in the prefill kernel
(``sequence_keys``: the bases move to the first key, the sequence gets shorter).
"""

import triton
import triton.language as tl

from flashtune.kernels._flash_fwd import _attend_tiles, sequence_keys


@triton.jit(do_not_specialize=["q_heads", "kv_heads", "kv_group", "q_len", "num_splits"])
def decode_split_kernel(
    Q, K, V, Out, PartO, PartLse, SeqLens, Counters, KvStart,
    stride_qz, stride_qh, stride_qm,
    stride_kz, stride_kh, stride_kn,
    stride_vz, stride_vh, stride_vn,
    stride_oz, stride_oh, stride_om,
    q_heads, kv_heads, kv_group, q_len, kv_cap, num_splits, qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_SEQLENS: tl.constexpr,
    USE_TMA: tl.constexpr,
    FUSED_COMBINE: tl.constexpr,
    HAS_KV_START: tl.constexpr,
):
    """Grid (num_splits, batch * kv_heads, row blocks): one key range of one KV head for
    BLOCK_H packed (query head, query position) rows. With ``FUSED_COMBINE`` the last split
    of a (batch, KV head, row block) to finish merges them all (``Counters``: one int32 a
    row block, zero between calls); otherwise ``decode_combine_kernel`` does, next."""
    split = tl.program_id(0)
    pid_zk = tl.program_id(1)
    off_z = pid_zk // kv_heads
    off_kv_h = pid_zk % kv_heads

    rows = tl.program_id(2) * BLOCK_H + tl.arange(0, BLOCK_H)
    row_ok = rows < kv_group * q_len
    pos = rows % q_len  # query position of each packed row
    heads = off_kv_h * kv_group + rows // q_len  # its query head
    offs_d = tl.arange(0, HEAD_DIM)

    z64 = off_z.to(tl.int64)
    q_rows = z64 * stride_qz + heads.to(tl.int64) * stride_qh + pos * stride_qm
    q = tl.load(Q + q_rows[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    k_base = K + z64 * stride_kz + off_kv_h.to(tl.int64) * stride_kh
    v_base = V + z64 * stride_vz + off_kv_h.to(tl.int64) * stride_vh

    seqlen, k_base, v_base = sequence_keys(SeqLens, KvStart, off_z, kv_cap, k_base, v_base, stride_kn, stride_vn,
                                           HAS_SEQLENS, HAS_KV_START)
    if USE_TMA:
        # This (batch, KV head)'s cache as a descriptor ending at its length: rows past it
        # load as zeros (the masked loop masks them too). At least one row: a descriptor
        # of an empty sequence is never read, but must be well formed.
        rows_kv = tl.maximum(seqlen, 1)
        k_desc = tl.make_tensor_descriptor(k_base, shape=[rows_kv, HEAD_DIM], strides=[stride_kn, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        v_desc = tl.make_tensor_descriptor(v_base, shape=[rows_kv, HEAD_DIM], strides=[stride_vn, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
    else:
        k_desc = k_base
        v_desc = v_base

    # This split's keys: a run of whole tiles, so every split but the last starts and ends
    # on a tile boundary (aligned, unmasked loads). Splits past the sequence get none.
    tiles_per_split = tl.cdiv(tl.cdiv(seqlen, BLOCK_N), num_splits)
    lo = split * tiles_per_split * BLOCK_N
    hi = tl.minimum(lo + tiles_per_split * BLOCK_N, seqlen)
    if IS_CAUSAL:
        causal_offset = seqlen - q_len
        # Keys every row sees (row 0 sees j <= seqlen - q_len), in whole tiles.
        clean_end = (tl.maximum(seqlen - q_len + 1, 0) // BLOCK_N) * BLOCK_N
    else:
        causal_offset = 0
        clean_end = (seqlen // BLOCK_N) * BLOCK_N
    mid = tl.maximum(tl.minimum(clean_end, hi), lo)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], dtype=tl.float32)
    acc, l_i, m_i = _attend_tiles(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, 1, k_desc, v_desc,
        pos, offs_d, lo, mid, seqlen, causal_offset, qk_scale,
        BLOCK_N, False, IS_CAUSAL, USE_TMA, False, False,
    )
    acc, l_i, m_i = _attend_tiles(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, 1, k_desc, v_desc,
        pos, offs_d, mid, hi, seqlen, causal_offset, qk_scale,
        BLOCK_N, True, IS_CAUSAL, USE_TMA, False, False,
    )

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # rows that saw no key: 0 / 1 = 0
    out = acc / l_safe[:, None]
    if num_splits == 1:
        o_rows = z64 * stride_oz + heads.to(tl.int64) * stride_oh + pos * stride_om
        tl.store(Out + o_rows[:, None] + offs_d[None, :], out.to(Out.dtype.element_ty), mask=row_ok[:, None])
    else:
        # Row id in the workspace: (batch, query head, position), then split, then head_dim.
        slot = ((z64 * q_heads + heads) * q_len + pos) * num_splits + split
        tl.store(PartO + slot[:, None] * HEAD_DIM + offs_d[None, :], out, mask=row_ok[:, None])
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.math.log2(l_safe))
        tl.store(PartLse + slot, lse, mask=row_ok)
        if FUSED_COMBINE:
            # Count this split in. The barrier puts every warp's partial stores before the
            # count, whose release makes them visible GPU-wide; the last split's acquire
            # makes every other split's visible to it (the split-K "semaphore" pattern).
            tl.debug_barrier()
            counter = Counters + pid_zk * tl.num_programs(2) + tl.program_id(2)
            arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
            if arrived == num_splits - 1:
                # Back to zero for the next call: a CUDA graph replays with the counts as
                # captured, and nothing else resets them.
                tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")
                first = ((z64 * q_heads + heads) * q_len + pos) * num_splits
                merged = _merge_splits(PartO, PartLse, first, num_splits, row_ok, offs_d, HEAD_DIM, BLOCK_H)
                o_rows = z64 * stride_oz + heads.to(tl.int64) * stride_oh + pos * stride_om
                tl.store(Out + o_rows[:, None] + offs_d[None, :], merged.to(Out.dtype.element_ty),
                         mask=row_ok[:, None])


@triton.jit
def _merge_splits(PartO, PartLse, first, num_splits, row_ok, offs_d,
                  HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr):
    """BLOCK_H rows' outputs from their ``num_splits`` partials (slots ``first`` + split),
    weighted by each split's log-sum-exp, as ``decode_combine_kernel`` merges one row.
    Loads bypass L1 (``.cg``): the partials were written by other SMs during this launch."""
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], dtype=tl.float32)
    for split in range(0, num_splits):
        slot = first + split
        lse = tl.load(PartLse + slot, mask=row_ok, other=float("-inf"), cache_modifier=".cg")
        part = tl.load(PartO + slot[:, None] * HEAD_DIM + offs_d[None, :], mask=row_ok[:, None], other=0.0,
                       cache_modifier=".cg")
        m_new = tl.maximum(m_i, lse)
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)  # no split of the row saw a key yet
        weight = tl.math.exp2(lse - m_sub)
        alpha = tl.math.exp2(m_i - m_sub)
        acc = acc * alpha[:, None] + weight[:, None] * part
        l_i = l_i * alpha + weight
        m_i = m_new
    return acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]


@triton.jit(do_not_specialize=["q_heads", "q_len", "num_splits"])
def decode_combine_kernel(
    Out, PartO, PartLse,
    stride_oz, stride_oh, stride_om,
    q_heads, q_len, num_splits,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """Grid (batch * q_heads * q_len, HEAD_DIM / BLOCK_D): merge one output row's splits for
    BLOCK_D of its columns.

    Latency-bound (a few KB a program, just written, so in L2): BLOCK_S is the space's
    largest split count, so every load of a row is in flight at once (masked lanes move
    no data); the runtime loop only runs again past it, and the split count needs no
    recompile. Splitting the columns over programs keeps the registers per thread low.
    """
    row = tl.program_id(0).to(tl.int64)
    pos = row % q_len
    off_h = (row // q_len) % q_heads
    off_z = row // (q_len * q_heads)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_s = tl.arange(0, BLOCK_S)

    m_i = tl.max(tl.full([BLOCK_S], float("-inf"), dtype=tl.float32), 0)
    l_i = tl.sum(tl.zeros([BLOCK_S], dtype=tl.float32), 0)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for s0 in range(0, num_splits, BLOCK_S):
        splits = s0 + offs_s
        ok = splits < num_splits
        slot = row * num_splits + splits
        lse = tl.load(PartLse + slot, mask=ok, other=float("-inf"))
        part = tl.load(PartO + slot[:, None] * HEAD_DIM + offs_d[None, :], mask=ok[:, None], other=0.0)
        m_new = tl.maximum(m_i, tl.max(lse, 0))
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)  # no split saw a key yet
        weight = tl.math.exp2(lse - m_sub)
        alpha = tl.math.exp2(m_i - m_sub)
        acc = acc * alpha + tl.sum(weight[:, None] * part, 0)
        l_i = l_i * alpha + tl.sum(weight, 0)
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)
    o_base = Out + off_z * stride_oz + off_h * stride_oh + pos * stride_om
    tl.store(o_base + offs_d, out.to(Out.dtype.element_ty))
