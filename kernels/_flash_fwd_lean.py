"""FlashAttention forward, the lean descriptor (TMA) kernel: every operand through tensor
descriptors, nothing but the two dots and the softmax in the hot loop.

Same contract as ``_flash_fwd`` (grouped-query heads, causal aligned bottom-right, ragged
lengths, fp8 with per-tensor scales and V transposed, rows that see no key write zeros);
written separately so that each suspected cost of the descriptor path can be switched on
and off by a constexpr and measured side by side (experiments/benchmarks/bench_prefill.py):

- ``DESC``: how descriptors address the tensors. ``"head"``: one 2-D descriptor per
  (batch, head), made on the device per tile (the shape ends at the sequence length, so
  ragged tails load zeros and stores clip). ``"flat"``: one 2-D descriptor over all rows
  ``[batch * heads * len, head_dim]`` (the tutorial's layout; needs contiguous heads; a
  ragged tail reads the next head's rows, which the masked phase discards, and a ragged
  last query tile is stored by pointers). ``"rank4"``: one 4-D descriptor
  ``[batch, heads, len, head_dim]`` with the tensor's own strides (clips per head like
  ``"head"``, made once like ``"flat"``).
- ``HOST_DESC``: ``"flat"``/``"rank4"`` descriptors made on the host
  (``triton.tools.tensor_descriptor.TensorDescriptor``) instead of once per program.
- ``Q_DESC``: Q loaded and O stored through descriptors (else masked pointer loads/stores).
- ``SCALE_EARLY``: scale the scores before the row max (one more multiply per score)
  instead of folding the scale into ``exp2(qk * scale - m)`` (one FMA).
- ``LAZY_RESCALE``: keep a stale row max until some row's max grew by more than 8 (log2
  units), so most blocks skip ``acc *= alpha``; exact, since the same max divides out at
  the end and the weights stay below 2^8 (FlashAttention 4's trick). Not with fp8 (P is
  stretched to e4m3's range).
- ``OVERLAP``: the unmasked loop issues block j+1's Q @ K^T before block j's softmax
  (FlashAttention 3's intra-warpgroup overlap, in software).
- ``PERSISTENT``: one program per SM looping over tiles; ``BH_MAJOR``: tile order with the
  (batch, head) index varying fastest, so the longest causal tiles of every head run first.

Key blocks fully visible to every row of a tile run unmasked; the causal diagonal band and
the ragged tail run in a second, masked loop.
"""

import triton
import triton.language as tl

from flashtune.kernels._flash_fwd import head_kv_descriptors, key_ranges, normalize, tile_coords


@triton.jit
def _load_block(desc, z, h, row0, row, BLOCK: tl.constexpr, WIDTH: tl.constexpr, DESC: tl.constexpr):
    """A [BLOCK, WIDTH] block at ``row`` of the (z, h) slice: rows for K/V/Q, columns for V^T."""
    if DESC == "rank4":
        return desc.load([z, h, row, 0]).reshape([BLOCK, WIDTH])
    elif DESC == "flat":
        return desc.load([row0 + row, 0])
    else:
        return desc.load([row, 0])


@triton.jit
def _load_vt_block(desc, z, h, row0, col, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, DESC: tl.constexpr):
    """fp8 V^T, stored (head_dim, kv_len) per head: the [HEAD_DIM, BLOCK_N] block at column ``col``."""
    if DESC == "rank4":
        return desc.load([z, h, 0, col]).reshape([HEAD_DIM, BLOCK_N])
    elif DESC == "flat":
        return desc.load([row0, col])
    else:
        return desc.load([0, col])


@triton.jit
def _load_v(v_desc, z, kv_h, k_row0, vt_row0, start_n, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
            DESC: tl.constexpr, FP8: tl.constexpr):
    if FP8:
        return _load_vt_block(v_desc, z, kv_h, vt_row0, start_n, HEAD_DIM, BLOCK_N, DESC).T
    else:
        return _load_block(v_desc, z, kv_h, k_row0, start_n, BLOCK_N, HEAD_DIM, DESC)


@triton.jit
def _pv(acc, p, v, FP8: tl.constexpr):
    """acc += P @ V in V's type."""
    if FP8:
        # P in [0, 1] would put small weights in e4m3's subnormals; stretched to
        # [0, 448] every weight keeps 3 mantissa bits (undone at the end).
        return tl.dot((p * 448.0).to(v.dtype), v, acc)
    else:
        return tl.dot(p.to(v.dtype), v, acc)


@triton.jit
def _softmax_pv(acc, l_i, m_i, qk, v, qk_scale, SCALE_EARLY: tl.constexpr, FP8: tl.constexpr):
    """One unmasked block's online-softmax update and P @ V; the scale folded into exp2's
    FMA, or (``SCALE_EARLY``) applied to the scores first."""
    if SCALE_EARLY:
        qk = qk * qk_scale
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
    else:
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = _pv(acc * alpha[:, None], p, v, FP8)
    return acc, l_i, m_new


@triton.jit
def _attend_blocks_overlapped(
    acc, l_i, m_i, q, k_desc, v_desc, z, kv_h, k_row0, vt_row0, lo, hi, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, DESC: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr, FP8: tl.constexpr,
):
    """Unmasked blocks [lo, hi) (hi > lo) with Q @ K^T of block j+1 issued before block j's
    softmax, so the tensor cores run the next scores while the softmax of these runs
    (FlashAttention 3's intra-warpgroup overlap; costs a second score tile of registers)."""
    k = _load_block(k_desc, z, kv_h, k_row0, lo, BLOCK_N, HEAD_DIM, DESC).T
    qk = tl.dot(q, k)
    for start_n in tl.range(lo + BLOCK_N, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = _load_block(k_desc, z, kv_h, k_row0, start_n, BLOCK_N, HEAD_DIM, DESC).T
        v = _load_v(v_desc, z, kv_h, k_row0, vt_row0, start_n - BLOCK_N, HEAD_DIM, BLOCK_N, DESC, FP8)
        qk_next = tl.dot(q, k)
        acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, qk, v, qk_scale, False, FP8)
        qk = qk_next
    v = _load_v(v_desc, z, kv_h, k_row0, vt_row0, hi - BLOCK_N, HEAD_DIM, BLOCK_N, DESC, FP8)
    acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, qk, v, qk_scale, False, FP8)
    return acc, l_i, m_i


@triton.jit
def _attend_blocks(
    acc, l_i, m_i, q, k_desc, v_desc, z, kv_h, k_row0, vt_row0,
    offs_m, lo, hi, kv_len, causal_offset, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr,
    DESC: tl.constexpr, SCALE_EARLY: tl.constexpr, LAZY_RESCALE: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr, FP8: tl.constexpr,
):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = _load_block(k_desc, z, kv_h, k_row0, start_n, BLOCK_N, HEAD_DIM, DESC).T
        v = _load_v(v_desc, z, kv_h, k_row0, vt_row0, start_n, HEAD_DIM, BLOCK_N, DESC, FP8)
        qk = tl.dot(q, k)
        if MASKED:
            # Keys past kv_len (zeros, or the next head's rows with flat descriptors) and,
            # when causal, keys after the query's diagonal get no weight.
            cols = start_n + offs_n
            keep = cols[None, :] < kv_len
            if IS_CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None] + causal_offset)
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            # A row with no visible key so far keeps m = -inf; subtract 0 instead so that
            # exp2 gives 0 rather than NaN (-inf - -inf).
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(qk - m_sub[:, None])
            alpha = tl.math.exp2(m_i - m_sub)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = _pv(acc * alpha[:, None], p, v, FP8)
            m_i = m_new
        elif LAZY_RESCALE:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            if tl.max(m_new - m_i, 0) > 8.0:
                alpha = tl.math.exp2(m_i - m_new)
                acc = acc * alpha[:, None]
                l_i = l_i * alpha
                m_i = m_new
            p = tl.math.exp2(qk * qk_scale - m_i[:, None])
            l_i = l_i + tl.sum(p, 1)
            acc = _pv(acc, p, v, FP8)
        else:
            acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, qk, v, qk_scale, SCALE_EARLY, FP8)
    return acc, l_i, m_i


@triton.jit
def _lean_tile(
    q_desc, k_desc, v_desc, o_desc, QPtr, KPtr, VPtr, OutPtr, Scales,
    stride_qz, stride_qh, stride_qm,
    stride_kz, stride_kh, stride_kn,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_oz, stride_oh, stride_om,
    q_heads, kv_heads, q_len, kv_len, qk_scale, pid_m, pid_zh,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
    DESC: tl.constexpr, Q_DESC: tl.constexpr, SCALE_EARLY: tl.constexpr, LAZY_RESCALE: tl.constexpr,
    OVERLAP: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, FP8: tl.constexpr,
):
    """One tile: queries [pid_m * BLOCK_M, +BLOCK_M) of the (batch, query head) pid_zh."""
    z = pid_zh // q_heads
    h = pid_zh % q_heads
    kv_h = h // (q_heads // kv_heads)  # grouped-query: a group of query heads shares one K/V head
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    # Row offsets of this (batch, head) in the flat layouts (unused by the other DESC modes).
    q_row0 = pid_zh * q_len
    k_row0 = (z * kv_heads + kv_h) * kv_len
    vt_row0 = (z * kv_heads + kv_h) * HEAD_DIM

    if DESC == "head":
        # Per tile: the base is this tile's (batch, head), the shape ends at its length.
        q_base = QPtr + z.to(tl.int64) * stride_qz + h.to(tl.int64) * stride_qh
        o_base = OutPtr + z.to(tl.int64) * stride_oz + h.to(tl.int64) * stride_oh
        k_base = KPtr + z.to(tl.int64) * stride_kz + kv_h.to(tl.int64) * stride_kh
        v_base = VPtr + z.to(tl.int64) * stride_vz + kv_h.to(tl.int64) * stride_vh
        k_desc, v_desc = head_kv_descriptors(k_base, v_base, kv_len, stride_kn, stride_vn, stride_vd,
                                             HEAD_DIM, BLOCK_N, FP8)
        if Q_DESC:
            q_desc = tl.make_tensor_descriptor(q_base, shape=[q_len, HEAD_DIM], strides=[stride_qm, 1],
                                               block_shape=[BLOCK_M, HEAD_DIM])
            o_desc = tl.make_tensor_descriptor(o_base, shape=[q_len, HEAD_DIM], strides=[stride_om, 1],
                                               block_shape=[BLOCK_M, HEAD_DIM])

    if Q_DESC:
        q = _load_block(q_desc, z, h, q_row0, start_m, BLOCK_M, HEAD_DIM, DESC)
    else:
        q_ptrs = QPtr + z.to(tl.int64) * stride_qz + h.to(tl.int64) * stride_qh \
            + offs_m[:, None] * stride_qm + offs_d[None, :]
        q = tl.load(q_ptrs, mask=offs_m[:, None] < q_len, other=0.0)

    if FP8:
        qk_scale = qk_scale * tl.load(Scales) * tl.load(Scales + 1)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    causal_offset, unmasked_end, masked_end = key_ranges(start_m, q_len, kv_len, BLOCK_M, BLOCK_N, IS_CAUSAL)

    if OVERLAP:
        if unmasked_end > 0:
            acc, l_i, m_i = _attend_blocks_overlapped(
                acc, l_i, m_i, q, k_desc, v_desc, z, kv_h, k_row0, vt_row0, 0, unmasked_end, qk_scale,
                HEAD_DIM, BLOCK_N, DESC, WARP_SPECIALIZE, FP8,
            )
    else:
        acc, l_i, m_i = _attend_blocks(
            acc, l_i, m_i, q, k_desc, v_desc, z, kv_h, k_row0, vt_row0, offs_m, 0, unmasked_end, kv_len,
            causal_offset, qk_scale, HEAD_DIM, BLOCK_N, False, IS_CAUSAL, DESC, SCALE_EARLY,
            LAZY_RESCALE and not FP8, WARP_SPECIALIZE, FP8,
        )
    # The diagonal band and the ragged tail: a few blocks, never warp-specialized.
    acc, l_i, m_i = _attend_blocks(
        acc, l_i, m_i, q, k_desc, v_desc, z, kv_h, k_row0, vt_row0, offs_m, unmasked_end, masked_end,
        kv_len, causal_offset, qk_scale, HEAD_DIM, BLOCK_N, True, IS_CAUSAL, DESC, SCALE_EARLY,
        False, False, FP8,
    )

    out = normalize(acc, l_i, Scales, FP8).to(OutPtr.dtype.element_ty)
    if Q_DESC:
        if DESC == "rank4":
            o_desc.store([z, h, start_m, 0], out.reshape([1, 1, BLOCK_M, HEAD_DIM]))
        elif DESC == "flat":
            # Flat descriptors do not clip at the head's end: a ragged last tile goes by pointers.
            if start_m + BLOCK_M <= q_len:
                o_desc.store([q_row0 + start_m, 0], out)
            else:
                _store_rows(OutPtr, out, z, h, stride_oz, stride_oh, stride_om, offs_m, offs_d, q_len)
        else:
            o_desc.store([start_m, 0], out)
    else:
        _store_rows(OutPtr, out, z, h, stride_oz, stride_oh, stride_om, offs_m, offs_d, q_len)


@triton.jit
def _store_rows(OutPtr, out, z, h, stride_oz, stride_oh, stride_om, offs_m, offs_d, q_len):
    o_ptrs = OutPtr + z.to(tl.int64) * stride_oz + h.to(tl.int64) * stride_oh \
        + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, out, mask=offs_m[:, None] < q_len)


@triton.jit
def lean_attention_kernel(
    Q, K, V, Out, QPtr, KPtr, VPtr, OutPtr, Scales,
    stride_qz, stride_qh, stride_qm,
    stride_kz, stride_kh, stride_kn,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_oz, stride_oh, stride_om,
    batch, q_heads, kv_heads, q_len, kv_len, qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    DESC: tl.constexpr,
    HOST_DESC: tl.constexpr,
    Q_DESC: tl.constexpr,
    SCALE_EARLY: tl.constexpr,
    LAZY_RESCALE: tl.constexpr,
    OVERLAP: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    FP8: tl.constexpr,
    PERSISTENT: tl.constexpr,
    BH_MAJOR: tl.constexpr,
):
    """Q, K, V, Out: host descriptors (``HOST_DESC``) or the same tensors as the ``*Ptr`` ones.

    V (and ``stride_v*``) is V^T, (batch, kv_heads, head_dim, kv_len) read as (.., n, d),
    when ``FP8``.
    """
    # Descriptors that serve every tile of this program, made once (device side).
    if DESC == "flat" and not HOST_DESC:
        q_desc = tl.make_tensor_descriptor(QPtr, shape=[batch * q_heads * q_len, HEAD_DIM],
                                           strides=[stride_qm, 1], block_shape=[BLOCK_M, HEAD_DIM])
        o_desc = tl.make_tensor_descriptor(OutPtr, shape=[batch * q_heads * q_len, HEAD_DIM],
                                           strides=[stride_om, 1], block_shape=[BLOCK_M, HEAD_DIM])
        k_desc = tl.make_tensor_descriptor(KPtr, shape=[batch * kv_heads * kv_len, HEAD_DIM],
                                           strides=[stride_kn, 1], block_shape=[BLOCK_N, HEAD_DIM])
        if FP8:
            v_desc = tl.make_tensor_descriptor(VPtr, shape=[batch * kv_heads * HEAD_DIM, kv_len],
                                               strides=[stride_vd, 1], block_shape=[HEAD_DIM, BLOCK_N])
        else:
            v_desc = tl.make_tensor_descriptor(VPtr, shape=[batch * kv_heads * kv_len, HEAD_DIM],
                                               strides=[stride_vn, 1], block_shape=[BLOCK_N, HEAD_DIM])
    elif DESC == "rank4" and not HOST_DESC:
        q_desc = tl.make_tensor_descriptor(QPtr, shape=[batch, q_heads, q_len, HEAD_DIM],
                                           strides=[stride_qz, stride_qh, stride_qm, 1],
                                           block_shape=[1, 1, BLOCK_M, HEAD_DIM])
        o_desc = tl.make_tensor_descriptor(OutPtr, shape=[batch, q_heads, q_len, HEAD_DIM],
                                           strides=[stride_oz, stride_oh, stride_om, 1],
                                           block_shape=[1, 1, BLOCK_M, HEAD_DIM])
        k_desc = tl.make_tensor_descriptor(KPtr, shape=[batch, kv_heads, kv_len, HEAD_DIM],
                                           strides=[stride_kz, stride_kh, stride_kn, 1],
                                           block_shape=[1, 1, BLOCK_N, HEAD_DIM])
        if FP8:
            v_desc = tl.make_tensor_descriptor(VPtr, shape=[batch, kv_heads, HEAD_DIM, kv_len],
                                               strides=[stride_vz, stride_vh, stride_vd, 1],
                                               block_shape=[1, 1, HEAD_DIM, BLOCK_N])
        else:
            v_desc = tl.make_tensor_descriptor(VPtr, shape=[batch, kv_heads, kv_len, HEAD_DIM],
                                               strides=[stride_vz, stride_vh, stride_vn, 1],
                                               block_shape=[1, 1, BLOCK_N, HEAD_DIM])
    else:
        # Host descriptors, or "head" mode (made per tile inside _lean_tile).
        q_desc = Q
        k_desc = K
        v_desc = V
        o_desc = Out

    num_m_blocks = tl.cdiv(q_len, BLOCK_M)
    batch_heads = batch * q_heads
    if PERSISTENT:
        num_tiles = num_m_blocks * batch_heads
        for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0)):
            pid_m, pid_zh = tile_coords(tile, num_m_blocks, batch_heads, IS_CAUSAL, BH_MAJOR)
            _lean_tile(
                q_desc, k_desc, v_desc, o_desc, QPtr, KPtr, VPtr, OutPtr, Scales,
                stride_qz, stride_qh, stride_qm, stride_kz, stride_kh, stride_kn,
                stride_vz, stride_vh, stride_vn, stride_vd, stride_oz, stride_oh, stride_om,
                q_heads, kv_heads, q_len, kv_len, qk_scale, pid_m, pid_zh,
                HEAD_DIM, BLOCK_M, BLOCK_N, IS_CAUSAL, DESC, Q_DESC, SCALE_EARLY, LAZY_RESCALE,
                OVERLAP, WARP_SPECIALIZE, FP8,
            )
    else:
        # Grid (m-blocks, batch * heads), or (batch * heads, m-blocks) with BH_MAJOR.
        tile = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
        pid_m, pid_zh = tile_coords(tile, num_m_blocks, batch_heads, IS_CAUSAL, BH_MAJOR)
        _lean_tile(
            q_desc, k_desc, v_desc, o_desc, QPtr, KPtr, VPtr, OutPtr, Scales,
            stride_qz, stride_qh, stride_qm, stride_kz, stride_kh, stride_kn,
            stride_vz, stride_vh, stride_vn, stride_vd, stride_oz, stride_oh, stride_om,
            q_heads, kv_heads, q_len, kv_len, qk_scale, pid_m, pid_zh,
            HEAD_DIM, BLOCK_M, BLOCK_N, IS_CAUSAL, DESC, Q_DESC, SCALE_EARLY, LAZY_RESCALE,
            OVERLAP, WARP_SPECIALIZE, FP8,
        )
