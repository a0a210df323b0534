"""FlashAttention forward in one warp-specialized loop (``loads="lean_ws_oneloop"``).

Same contract as ``_flash_fwd`` and ``_flash_fwd_lean`` (grouped-query heads, causal
aligned bottom-right, any lengths, fp8 with per-tensor scales and V transposed, rows that
see no key write zeros), written so that Triton 3.6's automatic warp specialization
applies at 4 warps, where the lean kernel's ``lean_ws`` loop compiles without it
(compiled for sm90 on a CPU with ``objectives/aot.py``, BENCHMARKS.md "Prefill: the
minimal kernel's costs, one at a time"). What the warp-specialization pass refused there,
each seen on its own:

- a second key loop with a runtime bound, before or after the specialized one (the lean
  kernel's masked band and ragged tail), and the band as straight-line blocks before or
  after it (``PassManager::run failed``); a branch on the block index inside the loop
  (masked band blocks, unmasked others) compiles silently unspecialized (255 registers, 126
  spills at D128 causal 128x128). So the specialized loop runs every key block, each score
  masked by a per-row limit when the launch needs a mask at all (causal, or a ragged key
  tail): one compare and select a score, the scale then folded into exp2's FMA as in the
  unmasked loop. Unspecialized tiles (``specializes``: BLOCK_M below 128, strided inputs)
  run the lean kernel's split instead: the unmasked blocks, then the masked band;
- a branch in the epilogue (the lean kernel's descriptor store of full tiles, pointer
  store of a ragged last tile): here which store a launch uses is a constexpr (``EVEN_M``);
- descriptors made on the host, and rank-4 Q/O descriptors: here flat 2-D descriptors are
  made on the device, once a program (rank-4 ones, unspecialized, for strided inputs).

The loops run keys [0, hi) of the tile: hi is kv_len, or under a causal mask the last key
any of its rows sees (``key_ranges``, shared with the other kernels).
"""

import triton
import triton.language as tl

from flashtune.kernels._flash_fwd import key_ranges, normalize, tile_coords
from flashtune.kernels.space import SPECIALIZED_MIN_BLOCK_M


def specializes(block_m: int, flat: bool) -> bool:
    """Whether a ``warp_specialize`` variant's loop is specialized at this tile and layout
    (rank-4 descriptors make Triton 3.6's pass fail at 4 warps: those run unspecialized)."""
    return flat and block_m >= SPECIALIZED_MIN_BLOCK_M


@triton.jit
def _row_descriptor(base, rows, cols, stride, BLOCK: tl.constexpr, WIDTH: tl.constexpr):
    """A 2-D descriptor over ``rows`` rows of ``cols`` elements (the flat layouts)."""
    return tl.make_tensor_descriptor(base, shape=[rows, cols], strides=[stride, 1], block_shape=[BLOCK, WIDTH])


@triton.jit
def _head_descriptor(base, batch, heads, rows, cols, stride_z, stride_h, stride_r, BLOCK: tl.constexpr,
                     WIDTH: tl.constexpr):
    """A rank-4 descriptor (batch, heads, rows, cols) with the tensor's own strides: clips per head."""
    return tl.make_tensor_descriptor(base, shape=[batch, heads, rows, cols], strides=[stride_z, stride_h, stride_r, 1],
                                     block_shape=[1, 1, BLOCK, WIDTH])


@triton.jit
def _load(desc, z, h, row0, row, col, BLOCK: tl.constexpr, WIDTH: tl.constexpr, FLAT: tl.constexpr):
    """The [BLOCK, WIDTH] block at (row, col) of the (z, h) slice (flat: its rows start at ``row0``)."""
    if FLAT:
        return desc.load([row0 + row, col])
    else:
        return desc.load([z, h, row, col]).reshape([BLOCK, WIDTH])


@triton.jit
def _attend_block(acc, l_i, m_i, q, k_desc, v_desc, z, kv_h, k_row0, vt_row0, start_n, limit, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, FLAT: tl.constexpr, FP8: tl.constexpr,
                  MASKED: tl.constexpr, EMPTY_ROWS: tl.constexpr):
    """The online-softmax update of keys [start_n, start_n + BLOCK_N): (acc, l, m) after it.

    ``MASKED``: key j of row i gets no weight unless j < limit[i] (keys past kv_len, which
    are zeros or the next head's rows with flat descriptors, and, when causal, past the
    row's diagonal); -inf stays -inf through the scale folded into exp2 below.
    ``EMPTY_ROWS``: a row may have seen no key yet (m = -inf).
    """
    k = _load(k_desc, z, kv_h, k_row0, start_n, 0, BLOCK_N, HEAD_DIM, FLAT).T
    qk = tl.dot(q, k)
    if MASKED:
        qk = tl.where((start_n + tl.arange(0, BLOCK_N))[None, :] < limit[:, None], qk, float("-inf"))
    # The scale folded into exp2's FMA, as the minimal kernel does.
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    if EMPTY_ROWS:
        # Subtract 0 from a row that still has m = -inf, so that exp2 gives 0 rather than
        # NaN (-inf - -inf).
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_sub = m_new
    p = tl.math.exp2(qk * qk_scale - m_sub[:, None])
    alpha = tl.math.exp2(m_i - m_sub)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    if FP8:
        v = _load(v_desc, z, kv_h, vt_row0, 0, start_n, HEAD_DIM, BLOCK_N, FLAT).T
        # P stretched to e4m3's range (undone by normalize), as the other kernels do.
        acc = tl.dot((p * 448.0).to(v.dtype), v, acc)
    else:
        v = _load(v_desc, z, kv_h, k_row0, start_n, 0, BLOCK_N, HEAD_DIM, FLAT)
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@triton.jit
def one_loop_attention_kernel(
    Q, K, V, Out, Scales,
    stride_qz, stride_qh, stride_qm,
    stride_kz, stride_kh, stride_kn,
    stride_vz, stride_vh, stride_vr,
    stride_oz, stride_oh, stride_om,
    batch, q_heads, kv_heads, q_len, kv_len, v_cols, qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    FP8: tl.constexpr,
    BH_MAJOR: tl.constexpr,
    FLAT: tl.constexpr,
    EVEN_M: tl.constexpr,
    MASK: tl.constexpr,
    EMPTY_ROWS: tl.constexpr,
):
    """One tile of (BLOCK_M queries, one batch and query head) a program.

    V is (batch, kv_heads, kv_len, head_dim), or with ``FP8`` V^T (batch, kv_heads,
    head_dim, v_cols) with its rows padded to ``v_cols`` (``stride_vr``: the stride of
    V's rows either way).

    ``FLAT``: every tensor has (batch, heads, len) contiguous and is read through one 2-D
    descriptor over all its rows (the form that warp-specializes at 4 warps): a ragged tail
    block reads the next head's first rows, which the mask drops, and with ``EVEN_M``
    false (q_len not a multiple of BLOCK_M, a launch-time fact, so no runtime branch) the
    output goes by masked pointer stores. Otherwise rank-4 descriptors with the tensors'
    own strides, which clip per head.

    ``MASK`` (causal, or kv_len not a multiple of BLOCK_N) and ``EMPTY_ROWS`` (causal with
    q_len > kv_len: some rows see no key) are launch-time facts too: without them the loop
    runs no compare, select or guard (on the H200 the always-masked loop ran 475 TFLOP/s at
    D128 4,32,4096 non-causal where the minimal kernel, which has none, ran 531).
    """
    num_m_blocks = tl.cdiv(q_len, BLOCK_M)
    tile = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    pid_m, pid_zh = tile_coords(tile, num_m_blocks, batch * q_heads, IS_CAUSAL, BH_MAJOR)
    z = pid_zh // q_heads
    h = pid_zh % q_heads
    kv_h = h // (q_heads // kv_heads)  # grouped-query: a group of query heads shares one K/V head
    start_m = pid_m * BLOCK_M
    # First rows of this (batch, head) in the flat layouts (unused by rank-4 descriptors).
    q_row0 = pid_zh * q_len
    k_row0 = (z * kv_heads + kv_h) * kv_len
    vt_row0 = (z * kv_heads + kv_h) * HEAD_DIM

    if FLAT:
        q_desc = _row_descriptor(Q, batch * q_heads * q_len, HEAD_DIM, stride_qm, BLOCK_M, HEAD_DIM)
        o_desc = _row_descriptor(Out, batch * q_heads * q_len, HEAD_DIM, stride_om, BLOCK_M, HEAD_DIM)
        k_desc = _row_descriptor(K, batch * kv_heads * kv_len, HEAD_DIM, stride_kn, BLOCK_N, HEAD_DIM)
        if FP8:
            v_desc = _row_descriptor(V, batch * kv_heads * HEAD_DIM, v_cols, stride_vr, HEAD_DIM, BLOCK_N)
        else:
            v_desc = _row_descriptor(V, batch * kv_heads * kv_len, HEAD_DIM, stride_vr, BLOCK_N, HEAD_DIM)
    else:
        q_desc = _head_descriptor(Q, batch, q_heads, q_len, HEAD_DIM, stride_qz, stride_qh, stride_qm,
                                  BLOCK_M, HEAD_DIM)
        o_desc = _head_descriptor(Out, batch, q_heads, q_len, HEAD_DIM, stride_oz, stride_oh, stride_om,
                                  BLOCK_M, HEAD_DIM)
        k_desc = _head_descriptor(K, batch, kv_heads, kv_len, HEAD_DIM, stride_kz, stride_kh, stride_kn,
                                  BLOCK_N, HEAD_DIM)
        if FP8:
            v_desc = _head_descriptor(V, batch, kv_heads, HEAD_DIM, v_cols, stride_vz, stride_vh, stride_vr,
                                      HEAD_DIM, BLOCK_N)
        else:
            v_desc = _head_descriptor(V, batch, kv_heads, kv_len, HEAD_DIM, stride_vz, stride_vh, stride_vr,
                                      BLOCK_N, HEAD_DIM)
    if FP8:
        qk_scale = qk_scale * tl.load(Scales) * tl.load(Scales + 1)

    q = _load(q_desc, z, h, q_row0, start_m, 0, BLOCK_M, HEAD_DIM, FLAT)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    # Keys [0, band_start) are visible to every row of the tile; [band_start, hi) is the
    # causal diagonal band and the ragged key tail, the only blocks that pay a mask.
    causal_offset, band_start, hi = key_ranges(start_m, q_len, kv_len, BLOCK_M, BLOCK_N, IS_CAUSAL)
    if IS_CAUSAL:
        # Bottom-right: query i sees keys j <= i + (kv_len - q_len).
        limit = tl.minimum(offs_m + causal_offset + 1, kv_len)
    else:
        limit = tl.zeros([BLOCK_M], dtype=tl.int32) + kv_len

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if WARP_SPECIALIZE or not MASK:
        # One loop: the warp-specialization pass refuses a second one (and silently drops
        # the specialization for a branch on the block index inside it), so under a mask
        # every block pays it.
        for start_n in tl.range(0, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            acc, l_i, m_i = _attend_block(acc, l_i, m_i, q, k_desc, v_desc, z, kv_h, k_row0, vt_row0, start_n,
                                          limit, qk_scale, HEAD_DIM, BLOCK_N, FLAT, FP8, MASK, EMPTY_ROWS)
    else:
        # Unspecialized, nothing is lost by a second loop: the blocks every row sees run
        # without the mask, only the diagonal band and the ragged tail pay it. The
        # unmasked blocks come first, so m is finite when the band starts unless a row
        # sees no key at all (EMPTY_ROWS).
        for start_n in tl.range(0, band_start, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            acc, l_i, m_i = _attend_block(acc, l_i, m_i, q, k_desc, v_desc, z, kv_h, k_row0, vt_row0, start_n,
                                          limit, qk_scale, HEAD_DIM, BLOCK_N, FLAT, FP8, False, False)
        for start_n in tl.range(band_start, hi, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            acc, l_i, m_i = _attend_block(acc, l_i, m_i, q, k_desc, v_desc, z, kv_h, k_row0, vt_row0, start_n,
                                          limit, qk_scale, HEAD_DIM, BLOCK_N, FLAT, FP8, True, EMPTY_ROWS)

    out = normalize(acc, l_i, Scales, FP8).to(Out.dtype.element_ty)
    if not FLAT:
        o_desc.store([z, h, start_m, 0], out.reshape([1, 1, BLOCK_M, HEAD_DIM]))
    elif EVEN_M:
        o_desc.store([q_row0 + start_m, 0], out)
    else:
        # A flat descriptor does not clip at the head's end: rows past q_len are the next head's.
        offs_d = tl.arange(0, HEAD_DIM)
        o_ptrs = Out + z.to(tl.int64) * stride_oz + h.to(tl.int64) * stride_oh \
            + offs_m[:, None] * stride_om + offs_d[None, :]
        tl.store(o_ptrs, out, mask=offs_m[:, None] < q_len)
