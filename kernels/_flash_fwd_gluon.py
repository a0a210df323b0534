"""FlashAttention forward in Gluon with FlashAttention 3's schedule (``loads="gluon_ws"``,
``"gluon_pingpong"`` and ``"gluon_pingpong_ordered"``; Hopper only).

Written against Triton 3.6's Gluon (``triton.experimental.gluon``): layouts, shared memory,
mbarriers, TMA and warpgroup MMA are explicit, nothing is left to the compiler's passes.

One program a tile of ``NUM_GROUPS * M_TILE`` query rows of one (batch, query head), or
with ``PERSISTENT`` (the ``grid="persistent"`` knob) at most one a SM, each looping over
tiles (``_tile``: head by head, or longest causal tiles first; program p the p-th of each
round of programs-many tiles, with ``ZIGZAG``, ``grid="persistent_zigzag"``, the odd rounds
in reverse: ``_program_tile``) with every partition
walking the same tiles; the K/V ring and its phases run on across tiles, and Q is
double-buffered, so the producer loads the next tile's Q and K/V while the consumers
finish this one's last PV products and store its output (FA3's persistent schedule):

- a **producer** partition of one warp issues the TMA loads: each consumer group's Q tile
  once a tile, then every K/V block into a ring of ``NUM_STAGES`` stages, each stage guarded by
  a "ready" mbarrier (the TMA's transaction count completes it) and an "empty" one
  (every consumer group arrives when its warpgroup MMA no longer reads the stage);
- **consumer** groups of one warpgroup each (``num_warps`` warps; the default partition
  is group 0, a worker partition group 1 with ``gluon_pingpong*``), each owning ``M_TILE``
  rows. Two groups run the same instruction stream on two tiles, so one group's softmax
  (CUDA cores) fills the tensor pipe's gaps of the other's GEMMs: FA3's inter-warpgroup
  overlap, left to the warp schedulers, or with ``ORDERED`` (``gluon_pingpong_ordered``)
  enforced: the groups' GEMMs take turns. Registers move from the producer to the
  consumers (``worker_num_regs``).
- inside a group, FA3's intra-warpgroup overlap as written: the QK^T of block j and the PV
  of block j-1 are issued asynchronously back to back; ``warpgroup_mma_wait(1)`` returns
  when the QK^T is done (groups retire in order), and the wait for the PV product follows
  block j's softmax in the source. But ptxas (sm90) keeps waits, barriers and mbarrier
  arrivals in program order and moves arithmetic across them: it places the PV wait after
  the row maxima, ahead of the exponentials, so a group's softmax runs after its own PV
  product and only the other group's GEMMs run under it (``experiments/evaluation/sass_count.py
  --schedule`` shows the order). Holding the wait below the exponentials (a flag that stored
  P's row sums to shared memory; docs/results/overlap-2026-12-05/overlap-pv.patch) measured
  0.97-1.00x of this schedule on an H100, so the kernel keeps ptxas's. P stays in registers
  as the A operand of the PV product (a ``DotOperandLayout`` of the output's MMA layout).

Masks only where needed: ``MASK`` (a launch-time fact: causal, or a ragged key tail) adds
one runtime branch a block that masks only the blocks from the first one a row of the
group cannot fully see; the blocks before it run the bare softmax. Causal is aligned
bottom-right (query i sees keys j <= i + kv_len - q_len) and a group skips the blocks
above its diagonal (it still releases, unread, the blocks the program's other group
needs). Grouped-query attention maps query head h to K/V head h // (q_heads // kv_heads).

Tensors are read through flat 2-D descriptors (every (batch, head, row) one row), made
on the host: a ragged tail block reads the next head's first rows, which the mask drops;
with ``EVEN_M`` or ``PERSISTENT`` the output goes back through shared memory (Q's
buffer, no longer read) and a TMA store of a per-(batch, head) descriptor (a ragged tile's
rows past q_len clipped), otherwise by a masked pointer store (0 spills at D128 in a tiles
grid; in the persistent loop it spilled).

``LAZY_RESCALE`` (the launcher's, from head_dim 256 in 16 bits): FA4's conditional rescaling,
a row's running maximum kept until a block's exceeds it by 2^8 and a warp's accumulator
multiplies skipped in blocks where none of its rows moved (``_rescale_if_warp_moved``).

``FP8``: Q, K and V arrive as e4m3 with per-tensor scales (``Scales``: q, k, v, as
``kernels.attention.quantize_fp8`` makes them), and V transposed, [D, N] a head (V^T, keys
contiguous): Hopper's wgmma takes 8-bit operands from shared memory only K-major, and the
PV product's reduction runs over the keys. The producer TMA-loads [HEAD_DIM, BLOCK_N] tiles
of V^T and the consumers read them through a permuted view as the [BLOCK_N, HEAD_DIM] B
operand. P goes to e4m3 in registers stretched to [0, 448] (e4m3's largest value, so small
weights keep their mantissa; the exp2 is taken against the row maximum less log2 448, so the
stretch costs no multiply and the running sum carries it too), the PV product's A operand as
in 16 bits; q and k's scales fold into the softmax scale, v's into the output's. ``FP8_P``
(kernels/gluon.py ``FP8_P_FORMS``) says how P is formed: ``"permuted"`` (the op's) relabels
P's keys inside each 16-key group in FA3's order, so that the accumulator's registers become
the A operand's without leaving their threads, and reads V^T written in that order
(``quantize_fp8(..., v_order="fa3")``); ``"permuted_h2"`` is that with the exponentials in f16 (``ex2.approx.f16x2``; two MUFUs on
sm90 all the same, and slower); ``"exp2"`` converts P by warp shuffles; ``"multiply"``
also stretches it by a multiply a score after exp2 (the first fp8 form, kept to time against). The output (16-bit, ``Out``'s
type) goes out by the masked pointer store: Q's 8-bit buffer is too small to stage it (so
no persistent grid with fp8: resources.known_failure).
"""

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)


@gluon.jit
def _load_kv(k_desc, v_desc, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, kv_row, v_row, j, it,
             BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, FP8: gl.constexpr):
    """Producer: block ``j`` of the tile's K and V, the program's ``it``-th block, into their
    rings once every group released the stage.

    ``v_row``: V's row 0 of the head in the flat V (``kv_row``), or with ``FP8`` in the flat
    V^T (its first of HEAD_DIM rows), where block ``j`` is a column offset.
    """
    stage = it % NUM_STAGES
    phase = (it // NUM_STAGES) & 1
    # A fresh mbarrier counts as having completed the phase before its first (parity 1):
    # the first pass over the ring does not wait.
    mbarrier.wait(k_empty.index(stage), phase ^ 1)
    mbarrier.expect(k_ready.index(stage), k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, 0], k_ready.index(stage), k_smem.index(stage))
    mbarrier.wait(v_empty.index(stage), phase ^ 1)
    mbarrier.expect(v_ready.index(stage), v_desc.block_type.nbytes)
    if FP8:
        v_coords = [v_row, j * BLOCK_N]
    else:
        v_coords = [v_row + j * BLOCK_N, 0]
    tma.async_copy_global_to_shared(v_desc, v_coords, v_ready.index(stage), v_smem.index(stage))


@gluon.jit
def _tile(t, n_m, n_bh, q_heads, kv_heads, q_len, kv_len,
          M_TILE: gl.constexpr, BLOCK_N: gl.constexpr, NUM_GROUPS: gl.constexpr, IS_CAUSAL: gl.constexpr,
          LONGEST_FIRST: gl.constexpr, PERSISTENT: gl.constexpr):
    """Tile ``t`` of ``n_m`` query tiles by ``n_bh`` (batch, head)s -> (pid_zh, head_row, q_start,
    kv_row, n_program, n_ordered): its (batch, head), row 0 of that in the flat Q, its first
    query row in the head, row 0 of its K/V head, the key blocks the program loads for it and
    those group 0 reads (both groups read them: ``ORDERED``'s turns).

    Tiles go head by head (a head's query tiles side by side share K/V in L2), with
    ``LONGEST_FIRST`` (causal) each head's query tiles in reverse, its longest first. A
    persistent grid takes them in that order, program p every programs-th: the (batch, head)
    fastest instead (every head's longest tile first) ran 6-14 % slower on the H200 at D128
    causal (docs/results/u20p/peers.json: the programs in flight read as many heads' K/V as
    there are SMs, past L2); which program takes which is ``_program_tile``'s. A tiles grid
    reads its tile from the program's ids (``t`` unread).
    """
    BLOCK_M: gl.constexpr = NUM_GROUPS * M_TILE
    if not PERSISTENT:
        # One program a tile (``t`` is its index): the grid is (query tiles, batch * heads).
        pid_m = gl.program_id(0)
        pid_zh = gl.program_id(1)
        if LONGEST_FIRST:
            # Causal: the last query tiles see the most keys; start them first.
            pid_m = n_m - 1 - pid_m
    else:
        pid_m = t % n_m
        pid_zh = t // n_m
        if LONGEST_FIRST:
            pid_m = n_m - 1 - pid_m
    z = pid_zh // q_heads
    h = pid_zh % q_heads
    kv_h = h // (q_heads // kv_heads)  # grouped-query: a group of query heads shares one K/V head
    q_start = pid_m * BLOCK_M
    head_row = pid_zh * q_len
    kv_row = (z * kv_heads + kv_h) * kv_len
    causal_offset = kv_len - q_len
    if IS_CAUSAL:
        hi = gl.maximum(gl.minimum(q_start + BLOCK_M + causal_offset, kv_len), 0)
        n_ordered = gl.cdiv(gl.maximum(gl.minimum(q_start + M_TILE + causal_offset, kv_len), 0), BLOCK_N)
    else:
        hi = kv_len
        n_ordered = gl.cdiv(kv_len, BLOCK_N)
    n_program = gl.cdiv(hi, BLOCK_N)
    return pid_zh, head_row, q_start, kv_row, n_program, n_ordered


@gluon.jit
def _program_tiles(first, step, flip, n_tiles):
    """How many of the ``n_tiles`` tiles persistent program ``first`` of ``step`` takes: one a
    round of ``step`` tiles, the last round (``rem`` tiles) if its index there is inside it."""
    # Plain operators only: tests/kernels/test_gluon_zigzag.py runs these two on Python ints.
    rounds = (n_tiles + step - 1) // step
    rem = n_tiles - (rounds - 1) * step
    return rounds - 1 + (first + ((rounds - 1) & 1) * flip < rem)


@gluon.jit
def _program_tile(i, first, step, flip):
    """The ``i``-th tile of persistent program ``first`` of ``step``: index ``first`` of each round,
    with ``ZIGZAG`` (``flip = step - 1 - 2 * first``) index ``step - 1 - first`` of the odd rounds."""
    return i * step + first + (i & 1) * flip


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready, v_empty,
              first, step, flip, n_tiles, n_m, n_bh, q_heads, kv_heads, q_len, kv_len,
              M_TILE: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, NUM_GROUPS: gl.constexpr,
              IS_CAUSAL: gl.constexpr, LONGEST_FIRST: gl.constexpr, PERSISTENT: gl.constexpr,
              Q_BUFS: gl.constexpr, HEAD_DIM: gl.constexpr, FP8: gl.constexpr):
    """The load partition: for each tile of the program, each group's Q tile, then the tile's
    K/V blocks in order. It runs ahead of the consumers into the next tile as far as the ring
    and the Q buffers let it (a persistent grid: the next tile's loads under this tile's
    last products and epilogue)."""
    if PERSISTENT:
        it = 0  # K/V blocks the program loaded so far (the ring's position)
        for i in range(_program_tiles(first, step, flip, n_tiles)):  # i: tiles of the program so far
            t = _program_tile(i, first, step, flip)
            n_program = _produce_tile(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready,
                                      k_empty, v_ready, v_empty, t, i, it, n_m, n_bh, q_heads, kv_heads, q_len, kv_len,
                                      M_TILE, BLOCK_N, NUM_STAGES, NUM_GROUPS, IS_CAUSAL, LONGEST_FIRST, PERSISTENT,
                                      Q_BUFS, HEAD_DIM, FP8)
            it += n_program
    else:
        # No loop around a single tile (one in a tiles grid cost a D64 tile two spilled words).
        _produce_tile(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                      v_empty, first, 0, 0, n_m, n_bh, q_heads, kv_heads, q_len, kv_len, M_TILE, BLOCK_N, NUM_STAGES,
                      NUM_GROUPS, IS_CAUSAL, LONGEST_FIRST, PERSISTENT, Q_BUFS, HEAD_DIM, FP8)


@gluon.jit
def _produce_tile(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready, v_empty,
                  t, i, it, n_m, n_bh, q_heads, kv_heads, q_len, kv_len,
                  M_TILE: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, NUM_GROUPS: gl.constexpr,
                  IS_CAUSAL: gl.constexpr, LONGEST_FIRST: gl.constexpr, PERSISTENT: gl.constexpr,
                  Q_BUFS: gl.constexpr, HEAD_DIM: gl.constexpr, FP8: gl.constexpr):
    """The producer's loads of tile ``t``, the program's ``i``-th, whose blocks are its ``it``-th
    on; returns the tile's block count."""
    pid_zh, head_row, q_start, kv_row, n_program, n_ordered = _tile(
        t, n_m, n_bh, q_heads, kv_heads, q_len, kv_len, M_TILE, BLOCK_N, NUM_GROUPS, IS_CAUSAL, LONGEST_FIRST,
        PERSISTENT)
    if FP8:
        # V^T: HEAD_DIM rows a K/V head (the (batch, K/V head) of this tile's query head).
        v_row = (pid_zh // q_heads * kv_heads + pid_zh % q_heads // (q_heads // kv_heads)) * HEAD_DIM
    else:
        v_row = kv_row
    slot = (i % Q_BUFS) * NUM_GROUPS
    for g in gl.static_range(NUM_GROUPS):
        # The buffer's last tile (Q_BUFS tiles ago) is done: its output is stored.
        mbarrier.wait(q_empty.index(slot + g), ((i // Q_BUFS) & 1) ^ 1)
        mbarrier.expect(q_ready.index(slot + g), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [head_row + q_start + g * M_TILE, 0], q_ready.index(slot + g),
                                        q_smem.index(slot + g))
    for j in range(n_program):
        _load_kv(k_desc, v_desc, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, kv_row, v_row, j, it + j,
                 BLOCK_N, NUM_STAGES, FP8)
    return n_program


#: log2 of e4m3's largest value (448): fp8's P is exp2'd against the row maximum less this,
#: so its weights land in [0, 448] with no multiply a score (the stretch that keeps small
#: weights' mantissa in e4m3).
_LOG2_FP8_MAX = gl.constexpr(8.807354922057604)


@gluon.jit
def _exp2_h2(x):
    """exp2 of fp32 ``x`` in half precision, two elements a PTX instruction (``ex2.approx.f16x2``;
    ptxas for sm90 still emits one MUFU.EX2.F16 an element): f16 P. fp8's P needs only e4m3's 3 mantissa bits, and the
    argument range fits f16: at most log2 448 < 9 (the shifted maximum), and very negative
    (or -inf, masked) arguments underflow to 0 as they should."""
    # cvt.rn.f16x2.f32 d, a, b puts a in the upper half: element 0 ($1) goes low.
    return gl.inline_asm_elementwise(
        "{ .reg .b32 t; cvt.rn.f16x2.f32 t, $2, $1; ex2.approx.f16x2 $0, t; }",
        "=r,r,r", [x], dtype=gl.float16, is_pure=True, pack=2)


#: Exponentials a thread computes together in ``_exp2_split`` (its registers in order), of which
#: ``EXP2_POLY`` go to the FMA pipe: the share is counted in sixteenths (every tile's thread
#: holds a multiple of 16 scores: at least 64 rows by 32 keys over 128 threads).
_PACK = 16
_EXP2_PACK = gl.constexpr(_PACK)
#: The asm's operands: ``_PACK`` results, then ``_PACK`` arguments, 32-bit registers each.
_EXP2_OPERANDS = gl.constexpr(",".join(["=r"] * _PACK + ["r"] * _PACK))


@triton.constexpr_function
def _exp2_split_asm(poly):
    """PTX for ``_EXP2_PACK`` exp2s of fp32 arguments <= 127 (here x - row max <= 0): the first
    ``poly`` (``EXP2_POLY``) on the FMA and integer pipes, the rest on MUFU (``ex2.approx``).

    FA4's emulation (Cody-Waite): 2^x = 2^floor(x) * 2^f with f = x - floor(x) in [0, 1).
    floor(x) comes from one add rounded down to 1.5 * 2^23 (the integer lands in the
    mantissa's low bits), 2^f from a degree-3 minimax polynomial (FA4's coefficients: relative
    error about 1e-4, below bf16's 4e-3 step that P is rounded to), and 2^floor(x) by adding
    floor(x) << 23 to the polynomial's exponent field. -inf (a masked key) clamps to -127 and
    gives 2^-127 * p(0), a denormal weight, not 0: so no emulation where a whole row can be
    masked (``EMPTY_ROWS``: such a row must keep l = 0).
    """
    lines = ["{", ".reg .b32 c, r, f, p;"]
    for i in range(_PACK):
        out, x = f"${i}", f"${_PACK + i}"
        if i < poly:
            lines += [
                f"max.ftz.f32 c, {x}, 0fC2FE0000;",  # -127 (and -inf -> -127)
                "add.rm.ftz.f32 r, c, 0f4B400000;",  # + 1.5 * 2^23, rounded down: floor(x) in the low bits
                "sub.rn.ftz.f32 f, r, 0f4B400000;",  # floor(x), exactly
                "sub.rn.ftz.f32 f, c, f;",  # the fraction, in [0, 1)
                "fma.rn.ftz.f32 p, f, 0f3D9DF09D, 0f3E6906A4;",  # 0.0771190897 f + 0.2275643945
                "fma.rn.ftz.f32 p, p, f, 0f3F31F519;",  # ... f + 0.6951461434
                "fma.rn.ftz.f32 p, p, f, 0f3F800000;",  # ... f + 1: 2^f in [1, 2)
                "shl.b32 r, r, 23;",  # floor(x) << 23 (the 1.5 * 2^23 bits shift out)
                f"add.s32 {out}, r, p;",  # into the exponent field
            ]
        else:
            lines.append(f"ex2.approx.ftz.f32 {out}, {x};")
    lines.append("}")
    return " ".join(lines)


@gluon.jit
def _exp2_split(x, POLY: gl.constexpr):
    """exp2 of fp32 ``x`` (<= 127), ``POLY`` of every ``_EXP2_PACK`` of a thread's elements on
    the FMA pipe (``_exp2_split_asm``), the others on MUFU.

    At D64 a block's exp2s on MUFU (16 a cycle an SM) take as long as its two GEMMs on the
    tensor cores: the softmax of one consumer group no longer fits under the other's GEMMs.
    The FMA pipe has room beside the softmax's other arithmetic (FA4's balance on Blackwell);
    every thread takes the same share, so every warp's MUFU and FMA work is even.
    """
    return gl.inline_asm_elementwise(
        _exp2_split_asm(POLY), _EXP2_OPERANDS, [x], dtype=gl.float32, is_pure=True, pack=_EXP2_PACK)


@gluon.jit
def _row_sum(p, rows: gl.constexpr):
    """P's row sums in fp32, in the layout ``rows`` (f16 P, ``permuted_h2``: summed in fp32 too;
    a block's f16 sum would hold, but l runs on across blocks)."""
    return gl.convert_layout(gl.sum(p.to(gl.float32), 1), rows)


@gluon.jit
def _scores(s, m_i, start_n, mask_from, limit, offs_n, qk_scale,
            MASK: gl.constexpr, EMPTY_ROWS: gl.constexpr, SHIFT: gl.constexpr, H2: gl.constexpr,
            POLY: gl.constexpr, TAU: gl.constexpr):
    """Block scores -> (P in fp32, the new row maxima, the rescale factor of what came before).

    P's weights are in [0, 1], with ``SHIFT`` (fp8) in [0, 448]: the shift is one subtraction a row,
    not a multiply a score; with ``H2`` (``permuted_h2``) P is f16, exp2'd two at a time. The
    row maxima and the rescale factor are the unshifted ones, so
    the running sum l carries the same 448 as the accumulator and it cancels in acc / l.
    (A weight that rounds a hair past 448 converts to 448: e4m3's conversion saturates.)
    ``POLY`` (``EXP2_POLY``): that many of every 16 exp2s of P on the FMA pipe (``_exp2_split``;
    fp8's shifted arguments are at most log2 448), none where a row may see no key, nor with ``H2``.
    ``TAU`` (``LAZY_RESCALE``): a row keeps its maximum until a block's exceeds it by more than
    ``TAU`` (log2 units), so P's weights reach 2^TAU and most blocks leave every maximum as it was.
    """
    if MASK:
        if start_n >= mask_from:
            # Keys past the row's diagonal (causal) or past kv_len (the next head's rows) get no weight.
            s = gl.where((start_n + offs_n)[None, :] < limit[:, None], s, float("-inf"))
    m_block = gl.max(s, 1) * qk_scale
    if TAU > 0:
        m_new = gl.where(m_block > m_i + TAU, m_block, m_i)
    else:
        m_new = gl.maximum(m_i, m_block)
    if EMPTY_ROWS:
        # A row that saw no key yet keeps m = -inf: subtract 0 so exp2 gives 0, not NaN.
        m_sub = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_sub = m_new
    if SHIFT:
        x = s * qk_scale - (m_sub - _LOG2_FP8_MAX)[:, None]
    else:
        x = s * qk_scale - m_sub[:, None]
    if H2:
        p = _exp2_h2(x)
    elif POLY > 0 and not EMPTY_ROWS:
        p = _exp2_split(x, POLY)
    else:
        p = gl.exp2(x)
    alpha = gl.exp2(m_i - m_sub)
    return p, m_new, alpha


#: Accumulator registers ``_rescale_if_warp_moved`` multiplies behind one branch.
_RESCALE_PACK = gl.constexpr(16)


@triton.constexpr_function
def _warp_moved_asm(rows):
    """PTX: 1.0 in each of a thread's ``rows`` results when some row of its warp has a rescale
    factor below 1 (a warp vote over every row the warp holds), else 0.0."""
    lines = ["{", ".reg .pred p, q;", f"setp.lt.f32 p, ${rows}, 0f3F800000;"]
    lines += [f"setp.lt.or.f32 p, ${rows + r}, 0f3F800000, p;" for r in range(1, rows)]
    lines.append("vote.sync.any.pred q, p, -1;")
    lines += [f"selp.f32 ${r}, 0f3F800000, 0f00000000, q;" for r in range(rows)]
    return " ".join(lines + ["}"])


@triton.constexpr_function
def _rescale_asm(pack):
    """PTX for ``pack`` accumulator values times their rows' rescale factors, skipped by a
    warp-uniform branch when no row of the warp moved its maximum (operands: ``pack`` results,
    then ``pack`` values, factors and warp flags)."""
    out, val, fac, flag = (range(k * pack, (k + 1) * pack) for k in range(4))
    lines = ["{", ".reg .pred q;", f"setp.ne.f32 q, ${flag[0]}, 0f00000000;"]
    lines += [f"mov.b32 ${o}, ${v};" for o, v in zip(out, val)]
    lines.append("@!q bra.uni SKIP;")
    lines += [f"mul.f32 ${o}, ${v}, ${f};" for o, v, f in zip(out, val, fac)]
    return " ".join(lines + ["SKIP:", "}"])


@triton.constexpr_function
def _constraints(outputs, inputs):
    return ",".join(["=r"] * outputs + ["r"] * inputs)


@gluon.jit
def _rescale_if_warp_moved(acc, alpha, ROWS: gl.constexpr):
    """``acc * alpha[:, None]``, each warp skipping the multiplies when none of its rows' factors
    is below 1 (``LAZY_RESCALE``). A warp vote and branches in PTX: a branch the group took on a
    reduction over its rows (shared memory and three barriers a block) ran 1-5 % slower on the
    H200 (BENCHMARKS.md, 2026-12-04c). ``ROWS``: the rows a thread holds (its warp's flag
    covers them all)."""
    moved = gl.inline_asm_elementwise(_warp_moved_asm(ROWS), _constraints(ROWS, ROWS), [alpha], dtype=gl.float32,
                                      is_pure=True, pack=ROWS)
    factor = gl.broadcast(alpha[:, None], acc)[0]
    flag = gl.broadcast(moved[:, None], acc)[0]
    return gl.inline_asm_elementwise(_rescale_asm(_RESCALE_PACK), _constraints(_RESCALE_PACK, 3 * _RESCALE_PACK),
                                     [acc, factor, flag], dtype=gl.float32, is_pure=True, pack=_RESCALE_PACK)


@gluon.jit
def _p_operand(p, dtype: gl.constexpr, p_layout: gl.constexpr, FP8: gl.constexpr, FP8_P: gl.constexpr):
    """P (fp32 weights in [0, 1], with fp8 in e4m3's [0, 448]) as the PV product's A operand in
    registers (``FP8_P``: kernels/gluon.py's FP8_P_FORMS).

    fp8's A operand holds 4 consecutive keys a thread (in each 16-key group, thread t of a
    quad keys 4t..4t+3), the scores' accumulator 2 (keys 2t, 2t+1, 8+2t, 9+2t): a layout
    conversion moves them between threads (warp shuffles). With ``FP8_P == "permuted"`` P's
    keys are relabelled instead, FA3's way: position 16g + 4t + 2h + b takes key
    16g + 8h + 2t + b, which thread t already holds, so the conversion stays inside each
    thread (byte permutes); V^T's keys were written in the same order (quantize_fp8's
    ``v_order="fa3"``), so the PV product sums the same pairs.
    """
    if FP8 and FP8_P == "multiply":
        p = p * 448.0
    p = p.to(dtype)
    if FP8 and (FP8_P == "permuted" or FP8_P == "permuted_h2"):
        M: gl.constexpr = p.shape[0]
        N: gl.constexpr = p.shape[1]
        p = p.reshape([M, N // 16, 2, 4, 2]).permute((0, 1, 3, 2, 4)).reshape([M, N])
        return gl.convert_layout(p, p_layout, assert_trivial=True)
    return gl.convert_layout(p, p_layout)


@gluon.jit
def _v_operand(v_smem, stage, FP8: gl.constexpr):
    """Stage ``stage`` of V's ring as the PV product's [BLOCK_N, HEAD_DIM] B operand (with
    ``FP8`` the ring holds V^T tiles: a permuted view, keys contiguous, K-major as fp8 wgmma needs)."""
    if FP8:
        return v_smem.index(stage).permute((1, 0))
    else:
        return v_smem.index(stage)


@gluon.jit
def _pv_done(o_tok, p_op, FP8: gl.constexpr):
    """Wait for the PV product in flight; its accumulator.

    P's registers are read by the MMA in flight: in 16 bits they are kept alive (a
    dependency of the wait) until it is done. Triton 3.6 cannot lower an 8-bit dependency
    ("Unexpected bitwidth in WGMMAWaitGroupOp: 8"), so fp8's P is not one: its registers are
    defined once a block, before the MMA, and not written again before this wait, and ptxas
    (which assigns the physical registers) keeps an in-flight wgmma's operands.
    """
    if FP8:
        acc = warpgroup_mma_wait(0, deps=[o_tok])
    else:
        acc, p_op = warpgroup_mma_wait(0, deps=[o_tok, p_op])
    return acc


@gluon.jit
def _release_previous(q_prev_empty, has_prev, PERSISTENT: gl.constexpr):
    """Persistent: the previous tile's output store has read its Q buffer (waited for only
    now, a block into this tile, so the store ran under this tile's first products): the
    producer may load the next-but-one tile's Q into it."""
    if PERSISTENT:
        tma.store_wait(0)
        mbarrier.arrive(q_prev_empty, count=1, pred=has_prev)


@gluon.jit
def _consumer_tile(group, q_tile, q_ready, q_phase, q_prev_empty, has_prev, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turns,
                   o_desc, Out, Scales, pid_zh, head_row, q_start, q_len, kv_len, n_program, n_ordered, it, turn,
                   qk_scale, HEAD_DIM: gl.constexpr, M_TILE: gl.constexpr, BLOCK_N: gl.constexpr,
                   NUM_STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, MASK: gl.constexpr, EMPTY_ROWS: gl.constexpr,
                   EVEN_M: gl.constexpr, ORDERED: gl.constexpr, PERSISTENT: gl.constexpr, FP8: gl.constexpr, FP8_P: gl.constexpr,
                   EXP2_POLY: gl.constexpr, LAZY_RESCALE: gl.constexpr, num_warps: gl.constexpr):
    """One consumer warpgroup's rows [q_start + group * M_TILE, + M_TILE) of one tile of its
    (batch, head), whose row 0 is row ``head_row`` of the flat Q and O; the tile's blocks are
    the program's ``it``-th on, its turns (``ORDERED``) the group's ``turn``-th on.

    ``ORDERED`` (two groups): in the first ``n_ordered`` blocks (those both groups read) a
    group issues its two GEMMs only on its turn and then hands the turn to the other
    group (FA3's warp-scheduler barrier, here a pair of mbarriers): the GEMMs of the two
    groups alternate, so one group's softmax always runs under the other's GEMMs.
    """
    dtype: gl.constexpr = q_tile.dtype
    k_width: gl.constexpr = 32 // dtype.primitive_bitwidth
    mma_k: gl.constexpr = 256 // dtype.primitive_bitwidth
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, mma_k])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_DIM, mma_k])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=k_width)
    s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)

    # LAZY_RESCALE (FA4's conditional rescaling): a warp rescales its accumulator only in blocks
    # where one of its rows moved its maximum; 16-bit P lets a row's maximum lag by 2^8 (P's
    # weights stay within bf16 and fp16, so almost no block moves one), fp8's P none (its weights
    # are stretched to e4m3's 448). What it saves is M_TILE x HEAD_DIM multiplies a block, against
    # M_TILE x BLOCK_N exponentials: worth it at head_dim 256 only (kernels/gluon.py).
    if LAZY_RESCALE and not FP8:
        tau: gl.constexpr = 8.0
    else:
        tau: gl.constexpr = 0.0
    causal_offset = kv_len - q_len
    row0 = q_start + group * M_TILE  # first query row of the group in its head
    offs_m = row0 + gl.arange(0, M_TILE, layout=s_rows)
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    if IS_CAUSAL:
        limit = gl.minimum(offs_m + causal_offset + 1, kv_len)
        hi = gl.maximum(gl.minimum(row0 + M_TILE + causal_offset, kv_len), 0)
        # The first block some row of the group does not see whole.
        mask_from = gl.maximum(gl.minimum((row0 + causal_offset + 1) // BLOCK_N, kv_len // BLOCK_N), 0) * BLOCK_N
    else:
        limit = gl.full([M_TILE], kv_len, gl.int32, layout=s_rows)
        hi = kv_len
        mask_from = (kv_len // BLOCK_N) * BLOCK_N
    n_blocks = gl.cdiv(hi, BLOCK_N)

    s_zero = gl.zeros([M_TILE, BLOCK_N], gl.float32, layout=s_layout)
    acc = gl.zeros([M_TILE, HEAD_DIM], gl.float32, layout=o_layout)
    l_i = gl.zeros([M_TILE], gl.float32, layout=o_rows)
    mbarrier.wait(q_ready, q_phase)
    if n_blocks > 0:
        # Block 0: its scores alone (no PV product in flight yet).
        first = it % NUM_STAGES
        mbarrier.wait(k_ready.index(first), (it // NUM_STAGES) & 1)
        s_tok = warpgroup_mma(q_tile, k_smem.index(first).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=[s_tok])
        mbarrier.arrive(k_empty.index(first), count=1)
        m_i = gl.full([M_TILE], float("-inf"), gl.float32, layout=s_rows)
        p, m_i, alpha = _scores(s, m_i, 0, mask_from, limit, offs_n, qk_scale, MASK, EMPTY_ROWS,
                                    FP8 and FP8_P != "multiply", FP8 and FP8_P == "permuted_h2",
                                    EXP2_POLY, tau)
        l_i = _row_sum(p, o_rows)
        _release_previous(q_prev_empty, has_prev, PERSISTENT)
        for j in range(1, n_blocks):
            stage = (it + j) % NUM_STAGES
            phase = ((it + j) // NUM_STAGES) & 1
            prev = (it + j - 1) % NUM_STAGES
            prev_phase = ((it + j - 1) // NUM_STAGES) & 1
            mbarrier.wait(k_ready.index(stage), phase)
            mbarrier.wait(v_ready.index(prev), prev_phase)
            p_op = _p_operand(p, dtype, p_layout, FP8, FP8_P)
            if ORDERED:
                # The k-th turn of group 0 follows group 1's (k-1)-th hand-over (its first
                # passes: a fresh mbarrier's phase before the first counts as complete); the
                # k-th turn of group 1 follows group 0's k-th.
                mbarrier.wait(turns.index(group), ((turn + j - 1) & 1) ^ (1 - group), pred=j < n_ordered)
            s_tok = warpgroup_mma(q_tile, k_smem.index(stage).permute((1, 0)), s_zero, use_acc=False,
                                  is_async=True)
            o_tok = warpgroup_mma(p_op, _v_operand(v_smem, prev, FP8), acc, is_async=True)
            if ORDERED:
                mbarrier.arrive(turns.index(1 - group), count=1, pred=j < n_ordered)
            # Groups retire in order: one left in flight means this block's scores are done.
            s = warpgroup_mma_wait(1, deps=[s_tok])
            mbarrier.arrive(k_empty.index(stage), count=1)
            p, m_i, alpha = _scores(s, m_i, j * BLOCK_N, mask_from, limit, offs_n, qk_scale, MASK, EMPTY_ROWS,
                                    FP8 and FP8_P != "multiply", FP8 and FP8_P == "permuted_h2",
                                    EXP2_POLY, tau)
            acc = _pv_done(o_tok, p_op, FP8)
            mbarrier.arrive(v_empty.index(prev), count=1)
            alpha_o = gl.convert_layout(alpha, o_rows)
            if LAZY_RESCALE:
                acc = _rescale_if_warp_moved(acc, alpha_o, 2 * M_TILE // (16 * num_warps))
            else:
                acc = acc * alpha_o[:, None]
            l_i = l_i * alpha_o + _row_sum(p, o_rows)
        last = (it + n_blocks - 1) % NUM_STAGES
        mbarrier.wait(v_ready.index(last), ((it + n_blocks - 1) // NUM_STAGES) & 1)
        p_op = _p_operand(p, dtype, p_layout, FP8, FP8_P)
        o_tok = warpgroup_mma(p_op, _v_operand(v_smem, last, FP8), acc, is_async=True)
        acc = _pv_done(o_tok, p_op, FP8)
        mbarrier.arrive(v_empty.index(last), count=1)
    else:
        _release_previous(q_prev_empty, has_prev, PERSISTENT)
    # Blocks the program's other group reads but this one does not (causal): release them unread.
    for j in range(n_blocks, n_program):
        stage = (it + j) % NUM_STAGES
        phase = ((it + j) // NUM_STAGES) & 1
        mbarrier.wait(k_ready.index(stage), phase)
        mbarrier.arrive(k_empty.index(stage), count=1)
        mbarrier.wait(v_ready.index(stage), phase)
        mbarrier.arrive(v_empty.index(stage), count=1)

    # Rows that saw no key: 0 / 1 = 0, as the other kernels write.
    l_safe = gl.where(l_i == 0.0, 1.0, l_i)
    if FP8 and FP8_P == "multiply":
        # V's scale, and the 448 P was stretched by after the sum l.
        l_safe = l_safe * (448.0 / gl.load(Scales + 2))
    elif FP8:
        # V's scale (the 448 P was stretched by is in l too: it cancels).
        l_safe = l_safe / gl.load(Scales + 2)
    out = (acc / l_safe[:, None]).to(Out.dtype.element_ty)
    if (EVEN_M or PERSISTENT) and not FP8:
        # O's descriptor is per (batch, head) (rank 3): a ragged tile's rows past q_len are
        # clipped, not written into the next head. (The masked pointer store spilled in the
        # persistent loop at D128.)
        q_tile.store(out)
        fence_async_shared()
        tma.async_copy_shared_to_global(o_desc, [pid_zh, row0, 0], q_tile.reshape([1, M_TILE, HEAD_DIM]))
        if not PERSISTENT:
            tma.store_wait(0)
    else:
        rows = row0 + gl.arange(0, M_TILE, layout=o_rows)
        cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        # 32-bit offsets within the head (64-bit ones spilled at D128): its base is one 64-bit scalar.
        head_out = Out + head_row.to(gl.int64) * HEAD_DIM
        gl.store(head_out + rows[:, None] * HEAD_DIM + cols[None, :], out, mask=(rows < q_len)[:, None])


@gluon.jit
def _consumer(group, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turns, o_desc,
              Out, Scales, first, step, flip, n_tiles, n_m, n_bh, q_heads, kv_heads, q_len, kv_len, qk_scale,
              HEAD_DIM: gl.constexpr, M_TILE: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
              NUM_GROUPS: gl.constexpr, IS_CAUSAL: gl.constexpr, LONGEST_FIRST: gl.constexpr,
              PERSISTENT: gl.constexpr, Q_BUFS: gl.constexpr, MASK: gl.constexpr, EMPTY_ROWS: gl.constexpr,
              EVEN_M: gl.constexpr, ORDERED: gl.constexpr, FP8: gl.constexpr, FP8_P: gl.constexpr,
              EXP2_POLY: gl.constexpr, LAZY_RESCALE: gl.constexpr, num_warps: gl.constexpr):
    """One consumer warpgroup over the program's tiles, in the producer's order."""
    if PERSISTENT:
        it = 0  # K/V blocks of the program's tiles so far (the ring's position)
        turn = 0  # ORDERED: the group's turns so far
        for i in range(_program_tiles(first, step, flip, n_tiles)):  # i: tiles of the program so far
            t = _program_tile(i, first, step, flip)
            pid_zh, head_row, q_start, kv_row, n_program, n_ordered = _tile(
                t, n_m, n_bh, q_heads, kv_heads, q_len, kv_len, M_TILE, BLOCK_N, NUM_GROUPS, IS_CAUSAL,
                LONGEST_FIRST, PERSISTENT)
            buf = (i % Q_BUFS) * NUM_GROUPS + group
            prev = ((i + Q_BUFS - 1) % Q_BUFS) * NUM_GROUPS + group
            _consumer_tile(group, q_smem.index(buf), q_ready.index(buf), (i // Q_BUFS) & 1, q_empty.index(prev), i > 0,
                           k_smem, v_smem,
                           k_ready, k_empty, v_ready, v_empty, turns, o_desc, Out, Scales, pid_zh, head_row, q_start,
                           q_len, kv_len, n_program, n_ordered, it, turn, qk_scale, HEAD_DIM, M_TILE, BLOCK_N,
                           NUM_STAGES, IS_CAUSAL, MASK, EMPTY_ROWS, EVEN_M, ORDERED, PERSISTENT, FP8, FP8_P, EXP2_POLY,
                           LAZY_RESCALE, num_warps)
            it += n_program
            # Each group takes a turn at every block but the first of those both read.
            turn += gl.maximum(n_ordered - 1, 0)
        tma.store_wait(0)
    else:
        pid_zh, head_row, q_start, kv_row, n_program, n_ordered = _tile(
            first, n_m, n_bh, q_heads, kv_heads, q_len, kv_len, M_TILE, BLOCK_N, NUM_GROUPS, IS_CAUSAL,
            LONGEST_FIRST, PERSISTENT)
        _consumer_tile(group, q_smem.index(group), q_ready.index(group), 0, q_empty.index(group), False, k_smem,
                       v_smem, k_ready, k_empty,
                       v_ready, v_empty, turns, o_desc, Out, Scales, pid_zh, head_row, q_start, q_len, kv_len,
                       n_program, n_ordered, 0, 0, qk_scale, HEAD_DIM, M_TILE, BLOCK_N, NUM_STAGES, IS_CAUSAL, MASK,
                       EMPTY_ROWS, EVEN_M, ORDERED, PERSISTENT, FP8, FP8_P, EXP2_POLY, LAZY_RESCALE, num_warps)


@gluon.jit
def _consumer_partition(GROUP: gl.constexpr, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                        v_empty, turns, o_desc, Out, Scales, first, step, flip, n_tiles, n_m, n_bh, q_heads, kv_heads,
                        q_len, kv_len, qk_scale, HEAD_DIM: gl.constexpr, M_TILE: gl.constexpr,
                        BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, NUM_GROUPS: gl.constexpr,
                        IS_CAUSAL: gl.constexpr, LONGEST_FIRST: gl.constexpr, PERSISTENT: gl.constexpr,
                        Q_BUFS: gl.constexpr, MASK: gl.constexpr, EMPTY_ROWS: gl.constexpr, EVEN_M: gl.constexpr,
                        ORDERED: gl.constexpr, FP8: gl.constexpr, FP8_P: gl.constexpr, EXP2_POLY: gl.constexpr,
                        LAZY_RESCALE: gl.constexpr, CONSUMER_WARPS: gl.constexpr):
    """Consumer group ``GROUP`` (0: the default partition; the others: worker partitions)."""
    _consumer(GROUP, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turns, o_desc, Out,
              Scales, first, step, flip, n_tiles, n_m, n_bh, q_heads, kv_heads, q_len, kv_len, qk_scale,
              HEAD_DIM, M_TILE, BLOCK_N, NUM_STAGES, NUM_GROUPS, IS_CAUSAL, LONGEST_FIRST, PERSISTENT, Q_BUFS,
              MASK, EMPTY_ROWS, EVEN_M, ORDERED, FP8, FP8_P, EXP2_POLY, LAZY_RESCALE, CONSUMER_WARPS)


@gluon.jit
def gluon_attention_kernel(
    q_desc, k_desc, v_desc, o_desc, Out, Scales,
    batch, q_heads, kv_heads, q_len, kv_len, qk_scale,
    HEAD_DIM: gl.constexpr,
    M_TILE: gl.constexpr,
    BLOCK_N: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    NUM_GROUPS: gl.constexpr,
    ORDERED: gl.constexpr,
    IS_CAUSAL: gl.constexpr,
    LONGEST_FIRST: gl.constexpr,
    PERSISTENT: gl.constexpr,
    MASK: gl.constexpr,
    EMPTY_ROWS: gl.constexpr,
    EVEN_M: gl.constexpr,
    FP8: gl.constexpr,
    FP8_P: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
    PRODUCER_REGS: gl.constexpr,
    num_warps: gl.constexpr,
    EXP2_POLY: gl.constexpr = 0,
    ZIGZAG: gl.constexpr = False,
    LAZY_RESCALE: gl.constexpr = False,
):
    """Grid: (query tiles of NUM_GROUPS * M_TILE rows, batch * q_heads), one program a tile;
    with ``PERSISTENT``, (programs,), program p taking tiles p, p + programs, ...

    ``Scales``: fp8's per-tensor scales [q, k, v] (float32; read only with ``FP8``).
    ``FP8_P``: how fp8's P is formed (module docstring; read only with ``FP8``).
    ``ZIGZAG``: the persistent programs take the odd rounds of tiles in reverse (``_program_tile``).
    ``LAZY_RESCALE``: a warp rescales its accumulator only where a row's maximum moved (``_consumer_tile``).
    ``EXP2_POLY``: of every 16 exponentials of 16-bit P, how many a polynomial on the FMA pipe
    computes (``_exp2_split``; ``loads="gluon_pingpong_poly"``), 0: all on MUFU.
    """
    BLOCK_M: gl.constexpr = NUM_GROUPS * M_TILE
    n_m = gl.cdiv(q_len, BLOCK_M)
    n_bh = batch * q_heads
    if PERSISTENT:
        first = gl.program_id(0)
        step = gl.num_programs(0)
        n_tiles = n_m * n_bh
    else:
        first = gl.program_id(0) + gl.program_id(1) * gl.num_programs(0)
        step = 1
        n_tiles = first + 1
    # ZIGZAG (grid="persistent_zigzag"): the odd rounds of tiles go to the programs in reverse,
    # so a program that took a long causal tile in one round takes a short one in the next.
    # Program p alone took every step-th tile: at 8 x 16 heads of 16 causal tiles on 132 SMs,
    # the busiest program had 1.21 times the blocks of the mean (132 = 4 mod 16: a program
    # saw only 4 of a head's 16 lengths); reversed every other round, 1.03.
    if PERSISTENT and ZIGZAG:
        flip = step - 1 - 2 * first
    else:
        flip = 0
    # A persistent program double-buffers Q: the producer loads the next tile's while the
    # consumers still read this one's (or store its output through it).
    Q_BUFS: gl.constexpr = 2 if PERSISTENT else 1
    if FP8:
        qk_scale = qk_scale * gl.load(Scales) * gl.load(Scales + 1)

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [Q_BUFS * NUM_GROUPS, M_TILE, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [NUM_STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    if FP8:
        v_smem = gl.allocate_shared_memory(v_desc.dtype, [NUM_STAGES, HEAD_DIM, BLOCK_N], v_desc.layout)
    else:
        v_smem = gl.allocate_shared_memory(v_desc.dtype, [NUM_STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [Q_BUFS * NUM_GROUPS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [Q_BUFS * NUM_GROUPS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # ORDERED: whose GEMMs are next
    for b in gl.static_range(Q_BUFS * NUM_GROUPS):
        mbarrier.init(q_ready.index(b), count=1)
        mbarrier.init(q_empty.index(b), count=1)  # one consumer group reads each buffer
    for g in gl.static_range(2):
        mbarrier.init(turns.index(g), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=NUM_GROUPS)
        mbarrier.init(v_empty.index(i), count=NUM_GROUPS)

    # The partitions' arguments are written out in each call: a tuple held in a variable
    # loses its constexprs (Triton 3.6's Gluon).
    if NUM_GROUPS == 2:
        gl.warp_specialize([
            (_consumer_partition, (0, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turns,
                                   o_desc, Out, Scales, first, step, flip, n_tiles, n_m, n_bh, q_heads, kv_heads, q_len, kv_len,
                                   qk_scale, HEAD_DIM, M_TILE, BLOCK_N, NUM_STAGES, NUM_GROUPS, IS_CAUSAL,
                                   LONGEST_FIRST, PERSISTENT, Q_BUFS, MASK, EMPTY_ROWS, EVEN_M, ORDERED, FP8, FP8_P,
                                   EXP2_POLY, LAZY_RESCALE, num_warps)),
            (_consumer_partition, (1, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turns,
                                   o_desc, Out, Scales, first, step, flip, n_tiles, n_m, n_bh, q_heads, kv_heads, q_len, kv_len,
                                   qk_scale, HEAD_DIM, M_TILE, BLOCK_N, NUM_STAGES, NUM_GROUPS, IS_CAUSAL,
                                   LONGEST_FIRST, PERSISTENT, Q_BUFS, MASK, EMPTY_ROWS, EVEN_M, ORDERED, FP8, FP8_P,
                                   EXP2_POLY, LAZY_RESCALE, num_warps)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                         v_empty, first, step, flip, n_tiles, n_m, n_bh, q_heads, kv_heads, q_len, kv_len,
                         M_TILE, BLOCK_N, NUM_STAGES, NUM_GROUPS, IS_CAUSAL, LONGEST_FIRST, PERSISTENT, Q_BUFS,
                         HEAD_DIM, FP8)),
        ], [num_warps, 1], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer_partition, (0, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turns,
                                   o_desc, Out, Scales, first, step, flip, n_tiles, n_m, n_bh, q_heads, kv_heads, q_len, kv_len,
                                   qk_scale, HEAD_DIM, M_TILE, BLOCK_N, NUM_STAGES, NUM_GROUPS, IS_CAUSAL,
                                   LONGEST_FIRST, PERSISTENT, Q_BUFS, MASK, EMPTY_ROWS, EVEN_M, ORDERED, FP8, FP8_P,
                                   EXP2_POLY, LAZY_RESCALE, num_warps)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                         v_empty, first, step, flip, n_tiles, n_m, n_bh, q_heads, kv_heads, q_len, kv_len,
                         M_TILE, BLOCK_N, NUM_STAGES, NUM_GROUPS, IS_CAUSAL, LONGEST_FIRST, PERSISTENT, Q_BUFS,
                         HEAD_DIM, FP8)),
        ], [1], [PRODUCER_REGS])
