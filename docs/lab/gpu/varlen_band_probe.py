"""2026-12-07 (sixth session) lab probe: the packed prefill kernel as changed on the CPU this session
("product", kernels/_flash_fwd_varlen.py) against the kernel before ("held", copied below as it was at
fae2584), and the dense kernel with the same tile on the same tokens. Three changes, from sm90 SASS
compiled on the CPU (docs/lab/tools/varlen_sass.py), none timed before this probe:

1. The causal band masks the scores by causality alone (``attend_causal_band``): a packed length is a
   loaded value, so ``cols < kv_len`` was one compare a key, where the dense kernel's length, a launch
   parameter specialized as a multiple of 16, takes one per 16 keys. Causality implies it for every
   stored row. The band's loop at Hopper's tile (64x64 w4 s3): 562 SASS instructions -> 521 (dense
   532); 5-10 % fewer on each of the 8 tiles.
2. The rows re-read after the loops with an SM-scoped load (LDG.E.STRONG.SM, may hit L1), not a
   volatile one (LDG.E.STRONG.SYS, L2).
3. The keys' cumulative lengths read before the early exit, with the queries' (the compiler had sunk
   them past it: a second round trip to memory before the first key tile).

Registers: 128 / 168 at 64x32 w4 s2 / Hopper's tile, as before; +-4 elsewhere, no program an SM lost.
Outputs bit-identical (``max_abs_diff``). The cells where the band and the prologue are a large share
of a tile's work (64 x 256 tokens) are where packed prefill stayed below dense (0.97x at the served tile
on the H100, 2026-12-07d).

The measurement, the cells and the table are varlen_regs_probe.py's, with this "held" kernel:

    python docs/lab/gpu/varlen_band_probe.py [--out FILE] [--rounds 3]     (a CUDA GPU; bf16, 32/8 heads, D128)
"""

import os
import sys

import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import varlen_regs_probe as probe

from flashtune.kernels._flash_fwd import _attend_tiles, key_ranges, normalize, tile_coords
from flashtune.kernels._flash_fwd_varlen import row_of_head, tile_rows


@triton.jit
def sequence_rows(CuSeqlens, off_z, total, RELOAD: tl.constexpr = False):
    """kernels/_flash_fwd_varlen.py's, as it was at fae2584: the re-read is volatile."""
    start = tl.minimum(tl.maximum(tl.load(CuSeqlens + off_z, volatile=RELOAD), 0), total)
    end = tl.minimum(tl.maximum(tl.load(CuSeqlens + off_z + 1, volatile=RELOAD), start), total)
    return start, end - start


@triton.jit(do_not_specialize=["batch", "total_q", "total_k", "max_seqlen_q"])
def band_by_length_kernel(
    Q, K, V, Out, CuSeqlensQ, CuSeqlensK,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_om, stride_oh,
    batch, q_heads, kv_group, total_q, total_k, max_seqlen_q, qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    WIDE_OFFSETS: tl.constexpr,
    PACK_GQA: tl.constexpr = 1,
):
    # PACK_GQA > 1 (the K/V group's size, which divides BLOCK_M): a tile's rows are BLOCK_M //
    # PACK_GQA queries x the PACK_GQA query heads of one K/V head, row r = query r // PACK_GQA of
    # head r % PACK_GQA, as FlashAttention 3's pack-GQA. A decode step's one query a sequence
    # then fills PACK_GQA rows of a tile, not one, and each K/V tile is read once for the group.
    QUERIES: tl.constexpr = BLOCK_M // PACK_GQA  # query positions a tile covers
    head_blocks = q_heads // PACK_GQA
    num_m_blocks = tl.cdiv(max_seqlen_q, QUERIES)
    pid_m, pid_zh = tile_coords(tl.program_id(0), num_m_blocks, batch * head_blocks, IS_CAUSAL, False)
    off_z = pid_zh // head_blocks
    off_h = (pid_zh % head_blocks) * PACK_GQA  # the tile's first query head
    off_kv_h = off_h // kv_group  # grouped-query: kv_group query heads share one K/V head

    # Both sequences' rows at once, before the early exit: one round trip to memory, not two.
    q_start, q_len = sequence_rows(CuSeqlensQ, off_z, total_q)
    k_start, kv_len = sequence_rows(CuSeqlensK, off_z, total_k)
    start_m = pid_m * QUERIES
    if start_m >= q_len:
        # A block past this sequence's queries (the grid is sized for the longest one), or
        # an empty sequence: nothing to write.
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



if __name__ == "__main__":
    probe.held_rows_kernel = band_by_length_kernel  # held() launches the module's kernel of that name
    default_out = os.path.join(os.environ.get("OUT", "/tmp"), "varlen_band.jsonl")
    raise SystemExit(probe.main(sys.argv[1:] if "--out" in sys.argv else [*sys.argv[1:], "--out", default_out]))
