"""FlashAttention forward as a Triton kernel (pointer loads, online softmax in base 2).

A tile is one BLOCK_M block of queries for one (batch, query head). By default one
program computes one tile; with ``PERSISTENT`` the launcher starts a fixed number of
programs (one per SM) and each strides over the tiles, which pays the per-program cost
once per SM rather than once per tile and mixes long and short causal tiles in every
program. Each tile walks the keys in two phases: key blocks that need no mask (fully
inside the sequence and, when causal, fully below the diagonal), then the remaining
blocks with masks (the diagonal band and the ragged tail). Splitting keeps the hot loop free of mask arithmetic.

K and V tiles come either from pointer loads or from device-side tensor descriptors
(TMA on Hopper, ``USE_TMA``); the unmasked loop may be warp-specialized
(``WARP_SPECIALIZE``: producer warps issue the loads, consumer warps do the math).

With ``FP8`` the launcher hands in e4m3 Q, K and V with per-tensor scales (``Scales``:
q, k, v) and V transposed to (head_dim, kv_len), because Hopper's fp8 dot needs its second
operand K-major; P is cast to e4m3 for the second dot, as in FlashAttention 3.

Causal masking is aligned bottom-right, as in FlashAttention 2: query i sees key j when
j <= i + (kv_len - q_len). Rows that see no key at all write zeros.

Per-sequence key ranges (``HAS_SEQLENS``, ``HAS_KV_START``): sequence b attends to keys
[KvStart[b], SeqLens[b]) of a cache of capacity ``kv_len``, causal aligned bottom-right
against SeqLens[b] (a static cache's filled length; left padding's first real key). Both
are clamped to the capacity here, so a value the launcher could not check (inside a CUDA
graph's capture) never reads out of bounds. The range start moves the K/V base pointers
and shortens the sequence, so the tile loops and masks are the plain ones: a query that
sees j <= i + (end - q_len) sees j' = j - start <= i + ((end - start) - q_len).
"""

import triton
import triton.language as tl


@triton.jit
def _attend_tiles(
    acc, l_i, m_i, q,
    k_base, v_base, stride_kn, stride_vn, stride_vd, k_desc, v_desc,
    offs_m, offs_d, lo, hi, kv_len, causal_offset, qk_scale,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    USE_TMA: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    FP8: tl.constexpr,
):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        if USE_TMA:
            # Rows past kv_len come back as zeros (the descriptor's padding).
            k = k_desc.load([start_n, 0]).T
            if FP8:
                v = v_desc.load([0, start_n]).T  # stored (head_dim, kv_len)
            else:
                v = v_desc.load([start_n, 0])
        else:
            k_ptrs = k_base + cols[None, :] * stride_kn + offs_d[:, None]
            v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd
            if MASKED:
                k = tl.load(k_ptrs, mask=cols[None, :] < kv_len, other=0.0)
                v = tl.load(v_ptrs, mask=cols[:, None] < kv_len, other=0.0)
            else:
                k = tl.load(k_ptrs)
                v = tl.load(v_ptrs)
        qk = tl.dot(q, k) * qk_scale
        if MASKED:
            keep = cols[None, :] < kv_len
            if IS_CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None] + causal_offset)
            qk = tl.where(keep, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            # A row with no visible key so far keeps m = -inf; subtract 0 instead so that
            # exp2 gives 0 rather than NaN (-inf - -inf).
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            m_sub = m_new
        p = tl.math.exp2(qk - m_sub[:, None])
        alpha = tl.math.exp2(m_i - m_sub)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if FP8:
            # P in [0, 1] would put small weights in e4m3's subnormals; stretched to
            # [0, 448] every weight keeps 3 mantissa bits (undone at the end).
            acc = tl.dot((p * 448.0).to(v.dtype), v, acc)
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def tile_coords(tile, num_m_blocks, batch_heads, IS_CAUSAL: tl.constexpr, BH_MAJOR: tl.constexpr):
    """(query block, batch * head) of the ``tile``-th tile in launch order.

    Head-major: consecutive tiles are query blocks of one (batch, head), so programs side
    by side read that head's K/V at about the same time and it stays in L2. ``BH_MAJOR``:
    consecutive tiles are one query block of every (batch, head), so every head's longest
    causal tiles start first and the short ones fill the tail. Causal tiles run from the
    end of the sequence (the longest) to its start either way.
    """
    if BH_MAJOR:
        pid_zh = tile % batch_heads
        pid_m = tile // batch_heads
    else:
        pid_zh = tile // num_m_blocks
        pid_m = tile % num_m_blocks
    if IS_CAUSAL:
        pid_m = num_m_blocks - 1 - pid_m
    return pid_m, pid_zh


@triton.jit
def key_ranges(start_m, q_len, kv_len, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """(causal_offset, unmasked_end, masked_end) of the query tile starting at ``start_m``:
    keys [0, unmasked_end) need no mask, keys [unmasked_end, masked_end) need one."""
    full_tiles_end = (kv_len // BLOCK_N) * BLOCK_N
    if IS_CAUSAL:
        causal_offset = kv_len - q_len
        # Keys every row of this tile may see: j <= start_m + causal_offset.
        unmasked_end = ((start_m + causal_offset + 1) // BLOCK_N) * BLOCK_N
        unmasked_end = tl.maximum(tl.minimum(unmasked_end, full_tiles_end), 0)
        # Keys some row of this tile may see.
        masked_end = tl.maximum(tl.minimum(start_m + BLOCK_M + causal_offset, kv_len), 0)
    else:
        causal_offset = 0
        unmasked_end = full_tiles_end
        masked_end = kv_len
    return causal_offset, unmasked_end, masked_end


@triton.jit
def head_kv_descriptors(k_base, v_base, kv_len, stride_kn, stride_vn, stride_vd,
                        HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, FP8: tl.constexpr):
    """Device-side descriptors of one (batch, head)'s K and V, ending at kv_len (rows past
    it load as zeros); fp8's V is V^T, (head_dim, kv_len)."""
    k_desc = tl.make_tensor_descriptor(k_base, shape=[kv_len, HEAD_DIM], strides=[stride_kn, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    if FP8:
        v_desc = tl.make_tensor_descriptor(v_base, shape=[HEAD_DIM, kv_len], strides=[stride_vd, 1],
                                           block_shape=[HEAD_DIM, BLOCK_N])
    else:
        v_desc = tl.make_tensor_descriptor(v_base, shape=[kv_len, HEAD_DIM], strides=[stride_vn, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
    return k_desc, v_desc


@triton.jit
def sequence_keys(SeqLens, KvStart, off_z, kv_cap, k_base, v_base, stride_kn, stride_vn,
                  HAS_SEQLENS: tl.constexpr, HAS_KV_START: tl.constexpr):
    """(keys, K base, V base) of sequence ``off_z``: keys [KvStart, SeqLens) of the cache,
    clamped to [0, kv_cap], as a sequence of their own (bases moved to the first key)."""
    kv_len = kv_cap
    if HAS_SEQLENS:
        kv_len = tl.minimum(tl.maximum(tl.load(SeqLens + off_z), 0), kv_cap)
    if HAS_KV_START:
        first = tl.minimum(tl.maximum(tl.load(KvStart + off_z), 0), kv_len)
        k_base += first.to(tl.int64) * stride_kn
        v_base += first.to(tl.int64) * stride_vn
        kv_len = kv_len - first
    return kv_len, k_base, v_base


@triton.jit
def normalize(acc, l_i, Scales, FP8: tl.constexpr):
    """The output rows: acc / l (rows that saw no key: 0 / 1 = 0), fp8's scales undone."""
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    if FP8:
        out = out * (tl.load(Scales + 2) / 448.0)
    return out


@triton.jit
def _attend_tile(
    Q, K, V, Out, Scales, SeqLens, KvStart,
    stride_qz, stride_qh, stride_qm,
    stride_kz, stride_kh, stride_kn,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_oz, stride_oh, stride_om,
    q_heads, kv_group, q_len, kv_len, qk_scale,
    pid_m, pid_zh,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    USE_TMA: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    FP8: tl.constexpr,
    HAS_SEQLENS: tl.constexpr,
    HAS_KV_START: tl.constexpr,
):
    """One tile: queries [pid_m * BLOCK_M, +BLOCK_M) of the (batch, query head) pid_zh."""
    off_z = pid_zh // q_heads
    off_h = pid_zh % q_heads
    off_kv_h = off_h // kv_group  # grouped-query: kv_group query heads share one K/V head

    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)

    q_base = Q + off_z.to(tl.int64) * stride_qz + off_h.to(tl.int64) * stride_qh
    k_base = K + off_z.to(tl.int64) * stride_kz + off_kv_h.to(tl.int64) * stride_kh
    v_base = V + off_z.to(tl.int64) * stride_vz + off_kv_h.to(tl.int64) * stride_vh
    o_base = Out + off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh
    kv_len, k_base, v_base = sequence_keys(SeqLens, KvStart, off_z, kv_len, k_base, v_base, stride_kn, stride_vn,
                                           HAS_SEQLENS, HAS_KV_START)

    if USE_TMA:
        # Per tile, because the descriptor's base is this tile's (batch, head) and its shape
        # ends at kv_len (rows past it load as zeros). A persistent program rewrites its
        # descriptors once per tile, after the previous tile's loads have all completed.
        k_desc, v_desc = head_kv_descriptors(k_base, v_base, tl.maximum(kv_len, 1), stride_kn, stride_vn, stride_vd,
                                             HEAD_DIM, BLOCK_N, FP8)
    else:
        k_desc = k_base
        v_desc = v_base

    row_ok = offs_m[:, None] < q_len
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=row_ok, other=0.0)

    if FP8:
        qk_scale = qk_scale * tl.load(Scales) * tl.load(Scales + 1)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    causal_offset, unmasked_end, masked_end = key_ranges(start_m, q_len, kv_len, BLOCK_M, BLOCK_N, IS_CAUSAL)

    acc, l_i, m_i = _attend_tiles(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, stride_vd, k_desc, v_desc,
        offs_m, offs_d, 0, unmasked_end, kv_len, causal_offset, qk_scale,
        BLOCK_N, False, IS_CAUSAL, USE_TMA, WARP_SPECIALIZE, FP8,
    )
    # The diagonal band and the tail: a few tiles, never warp-specialized.
    acc, l_i, m_i = _attend_tiles(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, stride_vd, k_desc, v_desc,
        offs_m, offs_d, unmasked_end, masked_end, kv_len, causal_offset, qk_scale,
        BLOCK_N, True, IS_CAUSAL, USE_TMA, False, FP8,
    )

    out = normalize(acc, l_i, Scales, FP8)
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :], out.to(Out.dtype.element_ty), mask=row_ok)


@triton.jit
def attention_forward_kernel(
    Q, K, V, Out, Scales, SeqLens, KvStart,
    stride_qz, stride_qh, stride_qm,
    stride_kz, stride_kh, stride_kn,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_oz, stride_oh, stride_om,
    batch, q_heads, kv_group, q_len, kv_len, qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    USE_TMA: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    FP8: tl.constexpr,
    PERSISTENT: tl.constexpr,
    BH_MAJOR: tl.constexpr,
    HAS_SEQLENS: tl.constexpr,
    HAS_KV_START: tl.constexpr,
):
    num_m_blocks = tl.cdiv(q_len, BLOCK_M)
    if PERSISTENT:
        # A fixed number of programs (the launcher's grid) stride over all tiles, so the
        # per-program cost (start-up, index math, the first loads' latency) is paid once per
        # program rather than once per tile, and the stride mixes long and short causal
        # tiles in every program.
        num_tiles = num_m_blocks * batch * q_heads
        for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0)):
            pid_m, pid_zh = tile_coords(tile, num_m_blocks, batch * q_heads, IS_CAUSAL, BH_MAJOR)
            _attend_tile(
                Q, K, V, Out, Scales, SeqLens, KvStart,
                stride_qz, stride_qh, stride_qm, stride_kz, stride_kh, stride_kn,
                stride_vz, stride_vh, stride_vn, stride_vd, stride_oz, stride_oh, stride_om,
                q_heads, kv_group, q_len, kv_len, qk_scale, pid_m, pid_zh,
                HEAD_DIM, BLOCK_M, BLOCK_N, IS_CAUSAL, USE_TMA, WARP_SPECIALIZE, FP8, HAS_SEQLENS, HAS_KV_START,
            )
    else:
        # One program per tile; the launcher's grid is (m-blocks, batch * heads), or
        # (batch * heads, m-blocks) with BH_MAJOR, so that linear program order is tile order.
        tile = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
        pid_m, pid_zh = tile_coords(tile, num_m_blocks, batch * q_heads, IS_CAUSAL, BH_MAJOR)
        _attend_tile(
            Q, K, V, Out, Scales, SeqLens, KvStart,
            stride_qz, stride_qh, stride_qm, stride_kz, stride_kh, stride_kn,
            stride_vz, stride_vh, stride_vn, stride_vd, stride_oz, stride_oh, stride_om,
            q_heads, kv_group, q_len, kv_len, qk_scale, pid_m, pid_zh,
            HEAD_DIM, BLOCK_M, BLOCK_N, IS_CAUSAL, USE_TMA, WARP_SPECIALIZE, FP8, HAS_SEQLENS, HAS_KV_START,
        )
