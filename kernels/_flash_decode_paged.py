"""Decode attention over a paged KV cache (FlashAttention's ``flash_attn_with_kvcache`` with a
block table), as Triton kernels: an append of the new keys into their pages, split-KV
partials, and the dense decode kernel's combine (kernels/_flash_decode.py) to merge them.

The cache is a pool of pages, K and V each (num_pages, PAGE_SIZE, kv_heads, head_dim), the
layout of transformers' and vLLM's page views. Sequence b's key j lives on page
BlockTable[b, j // PAGE_SIZE], row j % PAGE_SIZE. Everything else follows the dense decode
kernel:

* Grid (num_splits, batch x kv_heads, row blocks). The kv_group query heads sharing a KV
  head are packed with their q_len positions into one BLOCK_H-row tile (row r: head
  r // q_len of the group, position r % q_len), so each K/V tile is read once per KV head.
* Each sequence's keys are cut into ``num_splits`` runs of whole BLOCK_N tiles over its own
  length (a short sequence's later splits get nothing and write an empty partial). One
  split writes the output; more write float32 partials (rows already divided by their sum)
  and base-2 log-sum-exps that ``decode_combine_kernel`` merges, in the same workspace
  layout: (batch, query head, position), then split, then head_dim.
* Online softmax in base 2 with the scale folded in; an unmasked loop over the tiles every
  row sees, then a masked loop over the ragged tail and the causal band (bottom-right:
  query i of q_len sees key j when j <= i + seqlen - q_len). A row that sees no key, and so
  every row of a sequence with no keys, writes zeros.

Paging: a tile never needs the pages to be contiguous. When BLOCK_N divides PAGE_SIZE a tile
lies inside one page: one block-table load a tile and BLOCK_N consecutive rows (the fast
path; transformers' default page is 256 keys). Otherwise (a tile spanning small pages, or a
page size that is no multiple of the tile) every key looks up its own page: a gather of
BLOCK_N block-table entries, mostly equal, from L1.

Clamping, because the launcher may not read the lengths or the table on the host (CUDA-graph
capture, or a caller that guarantees them): a sequence's cached length is clamped to [0,
capacity] (capacity = max_pages x PAGE_SIZE, the block table's row) and its total (cached +
new) to the capacity, so no key's table slot is outside its row; a page read through the
table is clamped to [0, num_pages), so a bad entry reads some page of the cache, never past
it; and the append skips a row whose page is outside [0, num_pages) or whose position is
past the capacity, so a bad value never writes outside the cache (nor into page 0 for -1).
"""

import triton
import triton.language as tl


@triton.jit
def sequence_extent(CacheSeqlens, off_z, new_len, max_pages, PAGE_SIZE: tl.constexpr):
    """(cached keys, keys to attend) of sequence ``off_z``, both clamped to its block-table
    row's capacity: the append writes at [cached, total), attention reads [0, total)."""
    capacity = max_pages * PAGE_SIZE
    cached = tl.minimum(tl.maximum(tl.load(CacheSeqlens + off_z), 0), capacity)
    return cached, tl.minimum(cached + new_len, capacity)


@triton.jit
def page_of(table_row, keys, max_pages, num_pages, PAGE_SIZE: tl.constexpr):
    """The cache page holding each of ``keys`` (a scalar key or a vector of them): its
    table slot clamped to the row, its entry clamped to the pool."""
    slot = tl.minimum(keys // PAGE_SIZE, max_pages - 1)
    page = tl.load(table_row + slot)
    return tl.minimum(tl.maximum(page, 0), num_pages - 1).to(tl.int64)


@triton.jit
def _paged_tiles(
    acc, l_i, m_i, q, k_head, v_head, table_row,
    stride_kp, stride_ks, stride_vp, stride_vs,
    pos, offs_d, lo, hi, seqlen, causal_offset, qk_scale, max_pages, num_pages,
    BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    MASKED: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
):
    """Keys [lo, hi) into the running (acc, l, m) of the packed rows, tile by tile."""
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        in_page = cols % PAGE_SIZE
        if PAGE_SIZE % BLOCK_N == 0:
            page = page_of(table_row, start_n, max_pages, num_pages, PAGE_SIZE)  # the tile's one page
        else:
            page = page_of(table_row, cols, max_pages, num_pages, PAGE_SIZE)
        k_rows = page * stride_kp + in_page * stride_ks
        v_rows = page * stride_vp + in_page * stride_vs
        if MASKED:
            live = cols < seqlen
            k = tl.load(k_head + k_rows[None, :] + offs_d[:, None], mask=live[None, :], other=0.0)
            v = tl.load(v_head + v_rows[:, None] + offs_d[None, :], mask=live[:, None], other=0.0)
            visible = live[None, :]
            if IS_CAUSAL:
                visible = visible & (cols[None, :] <= pos[:, None] + causal_offset)
            scores = tl.where(visible, tl.dot(q, k) * qk_scale, float("-inf"))
        else:
            k = tl.load(k_head + k_rows[None, :] + offs_d[:, None])
            v = tl.load(v_head + v_rows[:, None] + offs_d[None, :])
            scores = tl.dot(q, k) * qk_scale
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        # Until a row sees a key its maximum stays -inf: shift by 0 so exp2 gives 0, not NaN.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(scores - shift[:, None])
        rescale = tl.math.exp2(m_i - shift)
        l_i = l_i * rescale + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * rescale[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit(do_not_specialize=["q_heads", "kv_heads", "kv_group", "q_len", "new_len", "num_pages", "max_pages",
                               "num_splits"])
def paged_split_kernel(
    Q, KCache, VCache, Out, PartO, PartLse, CacheSeqlens, BlockTable,
    stride_qz, stride_qm, stride_qh,
    stride_kp, stride_ks, stride_kh,
    stride_vp, stride_vs, stride_vh,
    stride_oz, stride_om, stride_oh,
    stride_tz,
    q_heads, kv_heads, kv_group, q_len, new_len, num_pages, max_pages, num_splits, qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
):
    """Grid (num_splits, batch * kv_heads, row blocks): one key range of one sequence's KV head
    for BLOCK_H packed (query head, position) rows. Q and Out are (batch, q_len, q_heads,
    head_dim); ``new_len`` keys were appended after each sequence's CacheSeqlens[b]."""
    split = tl.program_id(0)
    off_z = tl.program_id(1) // kv_heads
    off_kv_h = tl.program_id(1) % kv_heads

    rows = tl.program_id(2) * BLOCK_H + tl.arange(0, BLOCK_H)
    row_ok = rows < kv_group * q_len
    pos = rows % q_len
    heads = off_kv_h * kv_group + rows // q_len
    offs_d = tl.arange(0, HEAD_DIM)

    z64 = off_z.to(tl.int64)
    q_rows = z64 * stride_qz + pos.to(tl.int64) * stride_qm + heads.to(tl.int64) * stride_qh
    q = tl.load(Q + q_rows[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    k_head = KCache + off_kv_h.to(tl.int64) * stride_kh
    v_head = VCache + off_kv_h.to(tl.int64) * stride_vh
    table_row = BlockTable + z64 * stride_tz  # rows of the table are contiguous (the launcher's)
    _, seqlen = sequence_extent(CacheSeqlens, off_z, new_len, max_pages, PAGE_SIZE)

    # This split's keys: whole tiles, so every split but the last starts and ends on a tile.
    tiles_per_split = tl.cdiv(tl.cdiv(seqlen, BLOCK_N), num_splits)
    lo = split * tiles_per_split * BLOCK_N
    hi = tl.minimum(lo + tiles_per_split * BLOCK_N, seqlen)
    if IS_CAUSAL:
        causal_offset = seqlen - q_len
        seen_by_all = tl.maximum(seqlen - q_len + 1, 0)  # row 0 sees keys j <= seqlen - q_len
    else:
        causal_offset = 0
        seen_by_all = seqlen
    mid = tl.maximum(tl.minimum((seen_by_all // BLOCK_N) * BLOCK_N, hi), lo)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], dtype=tl.float32)
    acc, l_i, m_i = _paged_tiles(acc, l_i, m_i, q, k_head, v_head, table_row, stride_kp, stride_ks, stride_vp,
                                 stride_vs, pos, offs_d, lo, mid, seqlen, causal_offset, qk_scale, max_pages,
                                 num_pages, BLOCK_N, PAGE_SIZE, False, IS_CAUSAL)
    acc, l_i, m_i = _paged_tiles(acc, l_i, m_i, q, k_head, v_head, table_row, stride_kp, stride_ks, stride_vp,
                                 stride_vs, pos, offs_d, mid, hi, seqlen, causal_offset, qk_scale, max_pages,
                                 num_pages, BLOCK_N, PAGE_SIZE, True, IS_CAUSAL)

    seen = l_i > 0.0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]  # a row that saw no key: 0 / 1 = 0
    if num_splits == 1:
        o_rows = z64 * stride_oz + pos.to(tl.int64) * stride_om + heads.to(tl.int64) * stride_oh
        tl.store(Out + o_rows[:, None] + offs_d[None, :], out.to(Out.dtype.element_ty), mask=row_ok[:, None])
    else:
        slot = ((z64 * q_heads + heads) * q_len + pos) * num_splits + split
        tl.store(PartO + slot[:, None] * HEAD_DIM + offs_d[None, :], out, mask=row_ok[:, None])
        lse = tl.where(seen, m_i + tl.math.log2(tl.where(seen, l_i, 1.0)), float("-inf"))
        tl.store(PartLse + slot, lse, mask=row_ok)


@triton.jit(do_not_specialize=["kv_heads", "new_len", "num_pages", "max_pages"])
def paged_append_kernel(
    KNew, VNew, KCache, VCache, CacheSeqlens, BlockTable,
    stride_kz, stride_km, stride_kh,
    stride_vz, stride_vm, stride_vh,
    stride_ckp, stride_cks, stride_ckh,
    stride_cvp, stride_cvs, stride_cvh,
    stride_tz,
    kv_heads, new_len, num_pages, max_pages,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
):
    """Grid (batch * kv_heads, cdiv(new_len, BLOCK_M)): write BLOCK_M new keys and values of
    one sequence's KV head at positions CacheSeqlens[b] + row through the block table."""
    off_z = tl.program_id(0) // kv_heads
    off_h = (tl.program_id(0) % kv_heads).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    z64 = off_z.to(tl.int64)

    cached, total = sequence_extent(CacheSeqlens, off_z, new_len, max_pages, PAGE_SIZE)
    dest = cached + rows
    wanted = (rows < new_len) & (dest < total)
    table_row = BlockTable + z64 * stride_tz
    slot = tl.minimum(dest // PAGE_SIZE, max_pages - 1)
    page = tl.load(table_row + slot, mask=wanted, other=-1)
    # Not clamped as reads are: a write through a bad entry would land on another sequence's page.
    ok = wanted & (page >= 0) & (page < num_pages)
    page = page.to(tl.int64)
    in_page = dest % PAGE_SIZE
    src = z64 * stride_kz + rows.to(tl.int64) * stride_km + off_h * stride_kh
    k = tl.load(KNew + src[:, None] + offs_d[None, :], mask=ok[:, None])
    tl.store(KCache + (page * stride_ckp + in_page * stride_cks + off_h * stride_ckh)[:, None] + offs_d[None, :],
             k, mask=ok[:, None])
    src = z64 * stride_vz + rows.to(tl.int64) * stride_vm + off_h * stride_vh
    v = tl.load(VNew + src[:, None] + offs_d[None, :], mask=ok[:, None])
    tl.store(VCache + (page * stride_cvp + in_page * stride_cvs + off_h * stride_cvh)[:, None] + offs_d[None, :],
             v, mask=ok[:, None])
