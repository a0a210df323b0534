"""FlashAttention forward over packed variable-length sequences (FlashAttention's varlen layout).

Continuous batching packs prompts end to end without padding: Q is (total_q, q_heads,
head_dim), K and V are (total_k, kv_heads, head_dim), and sequence b owns rows
[CuSeqlensQ[b], CuSeqlensQ[b + 1]) of Q and [CuSeqlensK[b], CuSeqlensK[b + 1]) of K/V.

A tile is one BLOCK_M block of one sequence's queries for one query head, or with
``PACK_GQA`` (FlashAttention 3's pack-GQA) BLOCK_M / group queries for the group of query
heads sharing one K/V head, so that short queries (a decode step's one) fill more of a tile
and each K/V tile is read once for the group. The launcher cannot size the grid per sequence
without reading the lengths on the host, so it launches cdiv(max_seqlen_q, queries a tile)
query blocks for every (sequence, head or group) and a program whose block starts past its
sequence's length returns at once. The grid is one-dimensional
(tiles in head-major order, as the dense kernel's default): a 2-D grid's second axis stops
at 65,535, which batch x heads of a serving step can pass.

Once a program knows its sequence's rows, the tile is the dense kernel's: the same key
ranges (an unmasked loop over key blocks every row sees, then a masked one over the
diagonal band and the ragged tail), the same online softmax in fp32 (base 2) and the same
normalization, with causal aligned bottom-right per sequence (query i sees key j when
j <= i + k_len - q_len) and rows that see no key writing zeros. The causal band is its own
loop (``attend_causal_band``), the same but for one compare a key that causality makes
redundant. Only pointer loads: tensor descriptors would have to be made per sequence, and this
kernel must run on any GPU and in the interpreter.

The cumulative lengths are clamped to [0, total] (each end to at least its start) before
use, so values the launcher could not check (inside a CUDA graph's capture) never read or
write outside the buffers.

Row offsets are 64-bit only where a buffer needs them (``WIDE_OFFSETS``, which the launcher
sets from the buffers' sizes, never from the lengths): they cost 0.95-0.94x at 4 x 4,096
tokens on the H100 (docs/lab/2026-12-07.md, "The varlen kernel's prologue and offsets").
"""

import triton
import triton.language as tl

from flashtune.kernels._flash_fwd import _attend_tiles, key_ranges, normalize, tile_coords


@triton.jit
def sequence_rows(CuSeqlens, off_z, total, RELOAD: tl.constexpr = False):
    """(first row, rows) of sequence ``off_z`` in a packed tensor of ``total`` rows.

    ``RELOAD``: read again after the key loops (see the kernel's store), with a cache modifier
    the first read lacks, so the compiler cannot reuse that read and keep it in registers
    (sm90: the same registers as a volatile read, 168 at 64x64 w4 s3), and SM-scoped, so it
    may hit L1 (LDG.E.STRONG.SM; a volatile read is LDG.E.STRONG.SYS, which goes to L2)."""
    modifier: tl.constexpr = ".ca" if RELOAD else ""
    start = tl.minimum(tl.maximum(tl.load(CuSeqlens + off_z, cache_modifier=modifier), 0), total)
    end = tl.minimum(tl.maximum(tl.load(CuSeqlens + off_z + 1, cache_modifier=modifier), start), total)
    return start, end - start


@triton.jit
def row_of_head(base, row, stride_row, head, stride_head):
    """Where head ``head`` of packed row ``row`` starts: in 64-bit, because rows x heads x
    head_dim of a long packed batch passes 2**31 elements."""
    return base + row.to(tl.int64) * stride_row + head.to(tl.int64) * stride_head


# The sequence count, the totals and the longest length change at every step of a continuous
# batch: compiled as plain integers, a step never builds a binary of its own for a value that
# happens to be 1 or a multiple of 16 (they only bound the clamps and the tile count, no
# address math).
@triton.jit(do_not_specialize=["batch", "total_q", "total_k", "max_seqlen_q"])
def varlen_forward_kernel(
    Q, K, V, Out, CuSeqlensQ, CuSeqlensK,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_om, stride_oh,
    batch, q_heads, kv_group, total_q, total_k, max_seqlen_q, qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    WIDE_OFFSETS: tl.constexpr,
    PACK_GQA: tl.constexpr = 1,
    BY_TOKENS: tl.constexpr = False,
):
    # PACK_GQA > 1 (the K/V group's size, which divides BLOCK_M): a tile's rows are BLOCK_M //
    # PACK_GQA queries x the PACK_GQA query heads of one K/V head, row r = query r // PACK_GQA of
    # head r % PACK_GQA, as FlashAttention 3's pack-GQA. A decode step's one query a sequence
    # then fills PACK_GQA rows of a tile, not one, and each K/V tile is read once for the group.
    QUERIES: tl.constexpr = BLOCK_M // PACK_GQA  # query positions a tile covers
    head_blocks = q_heads // PACK_GQA
    if BY_TOKENS:
        # The grid is sized by the packed rows, not by the longest sequence (kernels/varlen.py,
        # ``tiles_by``): a tile finds its sequence among the cumulative lengths.
        slot, pid_zh = tile_coords(tl.program_id(0), total_q // QUERIES + batch, head_blocks, IS_CAUSAL, False)
        off_z = slot_sequence(CuSeqlensQ, batch, total_q, slot, QUERIES)
        off_h = pid_zh * PACK_GQA
    else:
        num_m_blocks = tl.cdiv(max_seqlen_q, QUERIES)
        pid_m, pid_zh = tile_coords(tl.program_id(0), num_m_blocks, batch * head_blocks, IS_CAUSAL, False)
        off_z = pid_zh // head_blocks
        off_h = (pid_zh % head_blocks) * PACK_GQA  # the tile's first query head
    off_kv_h = off_h // kv_group  # grouped-query: kv_group query heads share one K/V head

    # Both sequences' rows at once, before the early exit: one round trip to memory, not two.
    q_start, q_len = sequence_rows(CuSeqlensQ, off_z, total_q)
    k_start, kv_len = sequence_rows(CuSeqlensK, off_z, total_k)
    if BY_TOKENS:
        pid_m = slot - first_slot(q_start, off_z, QUERIES)
    start_m = pid_m * QUERIES
    nothing_to_write = start_m >= q_len
    if BY_TOKENS:
        nothing_to_write |= start_m < 0  # a slot before its sequence: only for lengths that decrease
    # kv_len is never negative (clamped): its test only keeps the keys' reads above the branch,
    # where the compiler otherwise sinks them past it (sm90 SASS), a second round trip before
    # the first key tile.
    if nothing_to_write | (kv_len < 0):
        # A block past this sequence's queries (the grid is sized for the longest one, or a
        # slot between two sequences), or an empty sequence: nothing to write.
        return

    offs_m, row_heads = tile_rows(start_m, BLOCK_M, PACK_GQA)
    offs_d = tl.arange(0, HEAD_DIM)
    if WIDE_OFFSETS:
        # A buffer of 2**31 elements or more: one sequence's keys x the packed row stride
        # (kv_heads x head_dim) pass it at about 2M keys of 8 x 128 (transformers' CUDA-graph
        # warm-up hands one sequence the whole paged cache), where int32 would wrap.
        stride_qm, stride_km = stride_qm.to(tl.int64), stride_km.to(tl.int64)
        stride_vm, stride_om = stride_vm.to(tl.int64), stride_om.to(tl.int64)
        q_base = row_of_head(Q, q_start, stride_qm, off_h, stride_qh)
        k_base = row_of_head(K, k_start, stride_km, off_kv_h, stride_kh)
        v_base = row_of_head(V, k_start, stride_vm, off_kv_h, stride_vh)
    else:
        q_base = Q + q_start * stride_qm + off_h * stride_qh
        k_base = K + k_start * stride_km + off_kv_h * stride_kh
        v_base = V + k_start * stride_vm + off_kv_h * stride_vh

    q_rows = offs_m[:, None] * stride_qm + offs_d[None, :]
    if PACK_GQA > 1:
        q_rows += row_heads[:, None] * stride_qh
    q = tl.load(q_base + q_rows, mask=offs_m[:, None] < q_len, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    causal_offset, unmasked_end, masked_end = key_ranges(start_m, q_len, kv_len, QUERIES, BLOCK_N, IS_CAUSAL)

    # The key loops take V's column stride 1 (the launcher checks head_dim is contiguous)
    # and the bases as descriptors, which pointer loads (USE_TMA off) never read. Their
    # causal mask reads each row's query position (offs_m), which packed rows share.
    acc, l_i, m_i = _attend_tiles(
        acc, l_i, m_i, q, k_base, v_base, stride_km, stride_vm, 1, k_base, v_base,
        offs_m, offs_d, 0, unmasked_end, kv_len, causal_offset, qk_scale,
        BLOCK_N, False, IS_CAUSAL, False, False, False,
    )
    if IS_CAUSAL:
        acc, l_i, m_i = attend_causal_band(
            acc, l_i, m_i, q, k_base, v_base, stride_km, stride_vm, offs_m, offs_d,
            unmasked_end, masked_end, kv_len, causal_offset, qk_scale, BLOCK_N,
        )
    else:
        acc, l_i, m_i = _attend_tiles(
            acc, l_i, m_i, q, k_base, v_base, stride_km, stride_vm, 1, k_base, v_base,
            offs_m, offs_d, unmasked_end, masked_end, kv_len, causal_offset, qk_scale,
            BLOCK_N, True, IS_CAUSAL, False, False, False,
        )

    # A sequence with no keys (or rows before its first visible key) kept l = 0: zeros.
    out = normalize(acc, l_i, Out, False)
    # The output's rows are read again rather than kept from the prologue: a loaded value
    # holds a per-thread register through both key loops (the dense kernel's lengths are
    # launch parameters, which do not), and those 14-24 registers cost 64x32 tiles one
    # program an SM on the H100 (144 against the dense kernel's 126; 128 re-read).
    q_start, q_len = sequence_rows(CuSeqlensQ, off_z, total_q, RELOAD=True)
    offs_m, row_heads = tile_rows(start_m, BLOCK_M, PACK_GQA)
    if WIDE_OFFSETS:
        o_base = row_of_head(Out, q_start, stride_om, off_h, stride_oh)
    else:
        o_base = Out + q_start * stride_om + off_h * stride_oh
    o_rows = offs_m[:, None] * stride_om + offs_d[None, :]
    if PACK_GQA > 1:
        o_rows += row_heads[:, None] * stride_oh
    tl.store(o_base + o_rows, out.to(Out.dtype.element_ty), mask=offs_m[:, None] < q_len)


@triton.jit
def attend_causal_band(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_d, lo, hi, kv_len,
                       causal_offset, qk_scale, BLOCK_N: tl.constexpr):
    """The prefill kernel's masked key loop (``_attend_tiles`` with ``MASKED``, causal, pointer
    loads) with the causal mask alone on the scores.

    The dense kernel's ``cols < kv_len`` costs it one compare per 16 keys, because its lengths
    are launch parameters specialized as multiples of 16; a packed sequence's length is a loaded
    value, so there it is one compare per key (at 64x64 w4 s3 on sm90, a loop of 562 SASS
    instructions with it, 521 without; dense 532). It is redundant on the scores: a query row i < q_len sees keys
    j <= i + kv_len - q_len <= kv_len - 1, so causality alone masks every key past the sequence
    for every row that is stored (rows past q_len are padding, never written). The loads keep
    it: keys past the sequence are another sequence's or past the buffer, read as zeros.
    """
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None], mask=cols[None, :] < kv_len, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=cols[:, None] < kv_len, other=0.0)
        qk = tl.dot(q, k) * qk_scale
        qk = tl.where(cols[None, :] <= offs_m[:, None] + causal_offset, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        # A row with no visible key so far keeps m = -inf: subtract 0, so exp2 gives 0, not NaN.
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(qk - m_sub[:, None])
        alpha = tl.math.exp2(m_i - m_sub)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def first_slot(start, sequence, QUERIES: tl.constexpr):
    """The first tile slot of the sequence whose rows start at ``start``: slots run by packed
    row, one extra per sequence before it, so that each sequence's tiles fit before the next
    one's (a sequence of n rows from row s takes cdiv(n, QUERIES) <= (s + n) // QUERIES -
    s // QUERIES + 1 slots), and all of them in total_q // QUERIES + batch."""
    return start // QUERIES + sequence


@triton.jit
def slot_sequence(CuSeqlensQ, batch, total_q, slot, QUERIES: tl.constexpr, SEARCH: tl.constexpr = 128):
    """The sequence whose tiles hold slot ``slot``: the last one whose first slot is at most it,
    counted over the cumulative lengths SEARCH at a time (one coalesced read for up to SEARCH
    sequences). Lengths that decrease give some sequence in [0, batch), never an index
    outside the buffers (its rows are clamped as any sequence's)."""
    count = tl.zeros([], dtype=tl.int32)
    for lo in range(0, batch, SEARCH):
        b = lo + tl.arange(0, SEARCH)
        inside = b < batch
        start = tl.minimum(tl.maximum(tl.load(CuSeqlensQ + b, mask=inside, other=0), 0), total_q)
        count += tl.sum((inside & (first_slot(start, b, QUERIES) <= slot)).to(tl.int32), axis=0)
    return tl.minimum(tl.maximum(count - 1, 0), batch - 1)


@triton.jit
def tile_rows(start_m, BLOCK_M: tl.constexpr, PACK_GQA: tl.constexpr):
    """(query position, head within the tile's group) of each of a tile's BLOCK_M rows."""
    rows = tl.arange(0, BLOCK_M)
    if PACK_GQA > 1:
        return start_m + rows // PACK_GQA, rows % PACK_GQA
    return start_m + rows, rows * 0
